//go:build !linux

package native

import (
	"context"
	"errors"

	"github.com/cohortml/cohort/distributed/transport"
)

// shmAvailable reports whether the shm transport is built in.
const shmAvailable = false

func connectShm(ctx context.Context, o *config, peers []int) (transport.Transport, error) {
	return nil, errors.New("distributed: Init: transport shm is not built into this binary (Linux only)")
}
