package tcp

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

var procSetup = transporttest.ListenSetup[*Transport](func(ctx context.Context, rank, world int) (*Listener, error) {
	return Listen(ctx, rank, world, "127.0.0.1:0", Options{Token: []byte("process-token")})
})

// TestHelperProcess is the body of the child processes of the tests below.
func TestHelperProcess(t *testing.T) { transporttest.HelperProcess(procSetup) }

// TestProcessesExchange: ranks in separate processes exchange messages
// of every size.
func TestProcessesExchange(t *testing.T) { transporttest.ProcessTests{}.Exchange(t) }

// TestProcessesKill9: SIGKILL one rank in the middle of large transfers;
// every survivor must get an error naming it within 5 s.
func TestProcessesKill9(t *testing.T) { transporttest.ProcessTests{}.Kill9(t) }
