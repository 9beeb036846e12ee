package native

import (
	"context"
	"fmt"
	"runtime"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/shm"
	"github.com/cohortml/cohort/internal/affinity"
)

// shmAvailable reports whether the shm transport is built in.
const shmAvailable = true

// connectShm connects this rank through shared memory with peers (nil:
// every rank).
func connectShm(ctx context.Context, o *config, peers []int) (transport.Transport, error) {
	spin := shmSpin
	if peers == nil {
		// Every rank is on this host. With other hosts a tcp link shares
		// the process, and its reader wakes through the netpoller, which a
		// goroutine polling the rings on the only P would hold off for up
		// to 10 ms (until sysmon polls the network).
		spin = shmSpinFor(o.localRanks, o.hostCPUs, runtime.GOMAXPROCS(0), affinity.Allowed(), runtime.NumCPU())
	}
	ln, err := shm.Listen(ctx, o.Rank, o.WorldSize, shm.Options{Token: o.Token, Spin: spin, Peers: peers, CPUs: o.hostCPUs})
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: rank %d: %w", o.Rank, err)
	}
	return finishConnect[*shm.Transport](ctx, o, "shm", ln.Addr(), peers, ln)
}
