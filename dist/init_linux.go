package dist

import (
	"context"
	"fmt"

	"cohort/dist/transport"
	"cohort/dist/transport/shm"
)

// shmAvailable reports whether the shm transport is built in.
const shmAvailable = true

func connectShm(ctx context.Context, o *Options) (transport.Transport, error) {
	ln, err := shm.Listen(ctx, o.Rank, o.WorldSize, shm.Options{Token: o.Token, Spin: o.spin(shmSpin, -1)})
	if err != nil {
		return nil, fmt.Errorf("dist: Init: rank %d: %w", o.Rank, err)
	}
	addrs, err := o.gather(ctx, "shm", ln.Addr())
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
