package dist

import (
	"context"
	"fmt"
	"runtime"

	"cohort/dist/transport"
	"cohort/dist/transport/shm"
	"cohort/internal/affinity"
)

// shmAvailable reports whether the shm transport is built in.
const shmAvailable = true

// connectShm connects this rank through shared memory with peers (nil:
// every rank).
func connectShm(ctx context.Context, o *Options, peers []int) (transport.Transport, error) {
	ln, err := shm.Listen(ctx, o.Rank, o.WorldSize, shm.Options{Token: o.Token, Spin: shmSpinFor(o.localRanks, o.hostCPUs, runtime.GOMAXPROCS(0), affinity.Allowed(), runtime.NumCPU()), Peers: peers, CPUs: o.hostCPUs})
	if err != nil {
		return nil, fmt.Errorf("dist: Init: rank %d: %w", o.Rank, err)
	}
	addrs, err := o.gatherFrom(ctx, "shm", ln.Addr(), peers)
	if err != nil {
		ln.Close()
		return nil, err
	}
	t, err := ln.Connect(ctx, addrs)
	if err != nil {
		return nil, fmt.Errorf("dist: Init: rank %d: %w", o.Rank, err)
	}
	return t, nil
}
