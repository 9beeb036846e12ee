package shm

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations on words in shared mappings: not FUTEX_PRIVATE_FLAG,
// so waiters and wakers may be different processes.
const (
	futexWait = 0
	futexWake = 1
)

// futexSleep blocks while *addr == val, at most d, or until woken. Spurious
// returns are allowed; callers re-check their condition. It reports
// whether the thread slept and was woken (not timed out, not refused
// because *addr had changed already).
func futexSleep(addr *uint32, val uint32, d time.Duration) bool {
	ts := unix.NsecToTimespec(int64(d))
	_, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	return errno == 0
}

// futexSleepRaw is futexSleep through a raw system call: the Go runtime
// does not know the thread sleeps, so its P stays with it (see
// peer.sleepOnRing).
func futexSleepRaw(addr *uint32, val uint32, d time.Duration) bool {
	ts := unix.NsecToTimespec(int64(d))
	_, _, errno := unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	return errno == 0
}

// futexWakeAll wakes every waiter on addr.
func futexWakeAll(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}

// schedYield gives the CPU to another runnable thread, if any. It is a raw
// system call: the Go runtime need not know, as the thread keeps its P.
func schedYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
