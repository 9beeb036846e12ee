package tcp

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// procTCP holds the kernel's TCP settings.
const procTCP = "/proc/sys/net/ipv4/"

// systemCongestion is the kernel's default congestion control ("" if
// unknown).
var systemCongestion = sync.OnceValue(func() string {
	b, err := os.ReadFile(procTCP + "tcp_congestion_control")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// setCongestion applies Options.Congestion to tc. Only a name asked for
// explicitly must be available; the automatic switch from BBR to cubic,
// made on loopback connections only, is skipped where cubic is not.
func setCongestion(tc *net.TCPConn, name string) error {
	explicit := name != ""
	switch name {
	case CongestionSystem:
		return nil
	case "":
		if name = autoCongestion(systemCongestion(), loopback(tc)); name == "" {
			return nil
		}
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	if serr != nil && explicit {
		avail, _ := os.ReadFile(procTCP + "tcp_available_congestion_control")
		return fmt.Errorf("congestion control %q (Options.Congestion): %w (this kernel offers: %s)", name, serr, strings.TrimSpace(string(avail)))
	}
	return nil
}

// autoCongestion is the congestion control the default ("") gives a
// connection, "" for the system's: cubic in place of BBR on loopback.
func autoCongestion(system string, loopback bool) string {
	if system == "bbr" && loopback {
		return "cubic"
	}
	return ""
}

// loopback reports whether tc connects this host to itself.
func loopback(tc *net.TCPConn) bool {
	a, ok := tc.RemoteAddr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// congestionOf returns tc's congestion control, for tests.
func congestionOf(tc *net.TCPConn) (string, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(name, "\x00"), gerr
}
