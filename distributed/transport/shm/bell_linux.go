package shm

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The progress goroutine's doorbell.
//
// A goroutine asleep in a futex system call keeps its P: Go's scheduler
// hands the P to another thread only once sysmon notices the call, 20 µs
// to 10 ms later. The progress goroutine sleeps most of the time, so on a
// worker with two Ps it held one of them through most of a training step,
// and the goroutine running the step's collectives waited for a P while
// the other one computed (in a traced FSDP step on a 2-core VM, the
// collectives' goroutine was runnable, not running, for 30 % of the
// step). So the progress goroutine sleeps reading a FIFO beside the
// segment instead: a read that would block parks the goroutine in Go's
// network poller and frees its P. Whoever wakes it (a peer's sender, a
// local receiver, Close) still bumps the doorbell word and then writes a
// byte to the FIFO. Where no FIFO can be made (a Dir without them) the
// owner says so in its segment (offBellFIFO 0) and everyone falls back
// to the futex on the doorbell word.
//
// Lost wake-ups cannot happen: a waker writes only after it saw the
// sleeping flag set, and the byte stays in the FIFO until the next read,
// so a sleeper that checked its conditions before the byte came returns
// at once. A byte left from a wake that found the poller awake costs one
// spurious turn of its loop.

// bell is this rank's end of its FIFO: r to sleep on (pollable), w to
// wake itself.
type bell struct {
	path string
	r    *os.File
	w    int
}

// bellPath is the FIFO beside the segment at path.
func bellPath(segPath string) string { return segPath + ".bell" }

// newBell creates and opens the FIFO of the segment at segPath.
func newBell(segPath string) (*bell, error) {
	path := bellPath(segPath)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("shm: create doorbell FIFO %s: %w", path, err)
	}
	// Read and write: the FIFO then always has a writer (no end of file
	// while peers come and go) and opening it never blocks.
	rfd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("shm: open doorbell FIFO %s: %w", path, err)
	}
	wfd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(rfd)
		unix.Unlink(path)
		return nil, fmt.Errorf("shm: open doorbell FIFO %s: %w", path, err)
	}
	// A non-blocking descriptor makes a File that reads through the poller.
	return &bell{path: path, r: os.NewFile(uintptr(rfd), path), w: wfd}, nil
}

// openPeerBell opens the FIFO of a peer's segment for ringing.
func openPeerBell(segPath string) (int, error) {
	fd, err := unix.Open(bellPath(segPath), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open doorbell FIFO %s: %w", bellPath(segPath), err)
	}
	return fd, nil
}

// ringFIFO writes one byte to the FIFO open at fd. A full FIFO already
// holds a wake-up; a reader gone (the owner died) is the liveness
// socket's to report.
func ringFIFO(fd int) {
	for {
		_, err := unix.Write(fd, []byte{1})
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// sleep waits until a byte arrives, at most d, and drains the FIFO. It
// reports whether a byte came.
func (b *bell) sleep(d time.Duration) bool {
	var buf [64]byte
	b.r.SetReadDeadline(time.Now().Add(d))
	n, _ := b.r.Read(buf[:])
	return n > 0
}

// unlink removes the FIFO's name (peers that opened it keep their
// descriptors).
func (b *bell) unlink() {
	if b != nil {
		unix.Unlink(b.path)
	}
}

// close closes both ends; nothing may ring or sleep on b afterwards.
func (b *bell) close() {
	if b != nil {
		b.r.Close()
		unix.Close(b.w)
	}
}
