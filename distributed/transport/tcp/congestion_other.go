//go:build !linux

package tcp

import (
	"errors"
	"net"
)

// setCongestion: choosing a connection's congestion control is Linux's
// (TCP_CONGESTION); elsewhere only the system default is possible.
func setCongestion(tc *net.TCPConn, name string) error {
	if name == "" || name == CongestionSystem {
		return nil
	}
	return errors.New("choosing the congestion control (Options.Congestion) needs Linux")
}

func congestionOf(tc *net.TCPConn) (string, error) {
	return "", errors.New("congestion control unknown off Linux")
}
