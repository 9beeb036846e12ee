//go:build !linux

package dist

import (
	"context"
	"errors"

	"cohort/dist/transport"
)

// shmAvailable reports whether the shm transport is built in.
const shmAvailable = false

func connectShm(ctx context.Context, o *Options, peers []int) (transport.Transport, error) {
	return nil, errors.New("dist: Init: transport shm is not built into this binary (Linux only)")
}
