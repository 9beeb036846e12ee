package tcp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

func procSetup(ctx context.Context, rank, world int, exchange func(string) ([]string, error)) (transport.Transport, error) {
	l, err := Listen(ctx, rank, world, "127.0.0.1:0", Options{Token: []byte("process-token")})
	if err != nil {
		return nil, err
	}
	addrs, err := exchange(l.Addr())
	if err != nil {
		l.Close()
		return nil, err
	}
	return l.Connect(ctx, addrs)
}

// TestHelperProcess is the body of the child processes of the tests below.
func TestHelperProcess(t *testing.T) { transporttest.HelperProcess(procSetup) }

func TestProcessesExchange(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			for r, res := range transporttest.RunProcesses(t, "TestHelperProcess", world, transporttest.ScenarioExchange, false, 60*time.Second) {
				if res.Line != "ok" {
					t.Errorf("rank %d: %s", r, res.Line)
				}
			}
		})
	}
}

// TestProcessesKill9: SIGKILL one rank in the middle of large transfers;
// every survivor must get an error naming it within 5 s.
func TestProcessesKill9(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			victim := world - 1
			for r, res := range transporttest.RunProcesses(t, "TestHelperProcess", world, transporttest.ScenarioTransfer, true, 5*time.Second) {
				want := fmt.Sprintf("peer-error %d ", victim)
				if !strings.HasPrefix(res.Line, want) {
					t.Errorf("rank %d reported %q, want an error naming rank %d", r, res.Line, victim)
					continue
				}
				t.Logf("rank %d after %v: %s", r, res.At.Round(time.Millisecond), res.Line)
			}
		})
	}
}
