//go:build !linux

package main

import (
	"errors"
	"net"
)

func originalDst(*net.TCPConn) (string, error) {
	return "", errors.New("original destination: needs Linux's SO_ORIGINAL_DST (give --upstream)")
}
