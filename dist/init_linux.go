package dist

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"cohort/dist/transport"
	"cohort/dist/transport/shm"
)

// shmAvailable reports whether the shm transport is built in.
const shmAvailable = true

// connectShm connects this rank through shared memory with peers (nil:
// every rank).
func connectShm(ctx context.Context, o *Options, peers []int) (transport.Transport, error) {
	ln, err := shm.Listen(ctx, o.Rank, o.WorldSize, shm.Options{Token: o.Token, Spin: shmSpin, Peers: peers, CPUs: o.hostCPUs})
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

// allowedCPUs lists the CPUs this process may run on; nil if the kernel
// does not say.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
