//go:build !amd64

package native

import "runtime"

// issuerPCs fills pcs with the return addresses of the frames above
// submit, the function that called enqueue, which called it.
//
//go:noinline
func issuerPCs(pcs []uintptr) {
	n := runtime.Callers(4, pcs) // skip Callers, issuerPCs, enqueue and submit
	clear(pcs[n:])
}
