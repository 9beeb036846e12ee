package main

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// originalDst returns the address c was sent to before a netfilter
// redirect (getsockopt SOL_IP SO_ORIGINAL_DST; IPv4 only).
func originalDst(c *net.TCPConn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var mreq *unix.IPv6Mreq
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		// struct sockaddr_in fits the 20 bytes of an IPv6Mreq
		mreq, gerr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return "", err
	}
	if gerr != nil {
		return "", fmt.Errorf("original destination (SO_ORIGINAL_DST): %w", gerr)
	}
	a := mreq.Multiaddr // sockaddr_in: family, port (big-endian), address
	port := uint16(a[2])<<8 | uint16(a[3])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{a[4], a[5], a[6], a[7]}), port).String(), nil
}
