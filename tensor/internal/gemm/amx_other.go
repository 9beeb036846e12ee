//go:build !amd64

package gemm

import (
	"errors"
	"runtime"
)

func amxSupport() error {
	return errors.New("AMX is an amd64 extension; this is " + runtime.GOARCH)
}

func bf16AMXArch() *bf16Arch { panic("gemm: no AMX kernel on this architecture") }
