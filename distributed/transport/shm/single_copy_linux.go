package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/wire"
)

// Single copy. A message of at least Options.RendezvousBytes travels
// without passing through the ring, when the receiver can read the
// sender's memory (Linux cross-memory attach, process_vm_readv; the
// receiver checks at setup, see probePeer): the sender publishes a record
// whose header has Length descBytes and whose body is a descriptor of the
// message (its pid, the address of its bytes), and waits; the receiver
// claims the descriptor, copies the bytes straight from the sender's
// memory into its own buffer and says done. One copy instead of two, and
// none of them through the shared ring; this is how OpenMPI's vader moves
// large messages.
//
// The descriptor's state word, in the ring, is a futex word both sides
// move forward with compare-and-swap:
//
//	offered → claimed → done      the receiver read the message; the record ends after the descriptor
//	offered → inline              the sender withdrew it (no receiver came within claimWait, or its ctx ended)
//	claimed → inline              the receiver's read failed
//	                              (inline: the payload follows the descriptor in the ring, as in any record)
//
// The progress goroutine never claims: a message no receiver is waiting
// for when the progress goroutine meets it goes inline into the box. So a
// Send never waits for its Recv longer than claimWait, however the
// receiver is busy, and the transport keeps its contract that sends do not
// need a matching receive to complete.

// Descriptor layout, right after the record header:
//
//	state u32 at +0 | pid u32 at +4 | address u64 at +8 | (zero) to +32
const (
	descBytes = 32

	descState = 0
	descPid   = 4
	descAddr  = 8

	stOffered = 0
	stClaimed = 1
	stDone    = 2
	stInline  = 3
)

// claimWait is how long a sender waits for a receiver to claim its
// descriptor before sending the message through the ring instead.
const claimWait = 2 * time.Millisecond

// rendezvous reports whether msg goes by single copy on this link.
func (p *peer) rendezvous(msg []byte) bool {
	return int64(len(msg)) >= p.t.opts.RendezvousBytes && atomic.LoadUint32(p.out.cma) == 1
}

// offer publishes the descriptor of msg at the ring's head after its
// header h, waits for the receiver, and returns the ring position where
// the payload goes if the message is to be sent inline after all, or
// done true. Caller holds p.mu and has waited for room for the header and
// the descriptor.
func (p *peer) offer(ctx context.Context, tag transport.Tag, h wire.Header, msg []byte) (head uint64, done bool, err error) {
	r := &p.out
	head = p.outHead
	h.Length = descBytes
	h.Put(r.data[head&r.mask:])
	d := r.data[(head+recordAlign)&r.mask:][:descBytes]
	clear(d)
	binary.LittleEndian.PutUint32(d[descPid:], uint32(p.t.pid))
	binary.LittleEndian.PutUint64(d[descAddr:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(msg)))))
	state := (*uint32)(unsafe.Pointer(&d[descState]))
	var pin runtime.Pinner // msg stays where the descriptor says until the receiver is done
	pin.Pin(unsafe.SliceData(msg))
	defer pin.Unpin()
	head += recordAlign + descBytes
	p.publish(head, tag)
	withdrawAt := time.Now().Add(max(p.t.opts.Spin, 0) + claimWait)
	for i := 1; ; i++ {
		switch atomic.LoadUint32(state) {
		case stDone:
			return head, true, nil
		case stInline:
			return head, false, nil
		case stOffered:
			if i%spinCheck == 0 && (ctx.Err() != nil || p.t.closed.Load() || p.sendErr.Load() != nil || time.Now().After(withdrawAt)) {
				if atomic.CompareAndSwapUint32(state, stOffered, stInline) {
					return head, false, nil
				}
				continue
			}
		case stClaimed:
			// The receiver is reading msg: msg is not the caller's again
			// before it is done, unless it died.
			if pe := p.sendErr.Load(); pe != nil && i%spinCheck == 0 {
				return head, false, pe
			}
		default:
			return head, false, fmt.Errorf("protocol error: descriptor state %d", atomic.LoadUint32(state))
		}
		if i%spinCheck != 0 {
			p.t.pause(i, uint64(len(msg)))
			continue
		}
		if v := atomic.LoadUint32(state); v == stOffered || v == stClaimed {
			futexSleep(state, v, 200*time.Microsecond)
		}
	}
}

// descriptor returns the state word, pid and address of the descriptor
// after the header at tail. Caller holds p.inMu.
func (p *peer) descriptor(tail uint64) (state *uint32, pid int, addr uintptr) {
	r := &p.in
	d := r.data[(tail+recordAlign)&r.mask:][:descBytes]
	return (*uint32)(unsafe.Pointer(&d[descState])), int(binary.LittleEndian.Uint32(d[descPid:])),
		uintptr(binary.LittleEndian.Uint64(d[descAddr:]))
}

// claim tries to read the message offered by the descriptor after the
// header at tail straight from the sender's memory into buf. It reports
// true if it did (the record then ends after the descriptor), false if the
// payload comes inline in the ring. Caller holds p.inMu.
func (p *peer) claim(tail uint64, buf []byte) bool {
	state, pid, addr := p.descriptor(tail)
	if !atomic.CompareAndSwapUint32(state, stOffered, stClaimed) {
		return false // withdrawn: inline
	}
	err := readPeer(pid, addr, buf)
	if err != nil {
		// Tell the sender to send it inline, and stop offering.
		atomic.StoreUint32(p.in.cma, 0)
		p.t.opts.Logger.Warn("shm: single copy failed; sending through the ring from now on", "rank", p.t.rank, "peer", p.rank, "err", err)
		atomic.StoreUint32(state, stInline)
	} else {
		atomic.StoreUint32(state, stDone)
	}
	futexWakeAll(state)
	return err == nil
}

// refuse makes the sender of the descriptor after the header at tail send
// its message inline (the progress goroutine's answer to every offer).
// Caller holds p.inMu.
func (p *peer) refuse(tail uint64) {
	state, _, _ := p.descriptor(tail)
	if atomic.CompareAndSwapUint32(state, stOffered, stInline) {
		futexWakeAll(state)
	}
}

// readPeer copies len(buf) bytes at addr in process pid into buf.
func readPeer(pid int, addr uintptr, buf []byte) error {
	for off := 0; off < len(buf); {
		local := []unix.Iovec{{Base: &buf[off]}}
		local[0].SetLen(len(buf) - off)
		remote := []unix.RemoteIovec{{Base: addr + uintptr(off), Len: len(buf) - off}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("process_vm_readv from pid %d: %w", pid, err)
		}
		if n <= 0 {
			return fmt.Errorf("process_vm_readv from pid %d: read %d bytes at %d of %d", pid, n, off, len(buf))
		}
		off += n
	}
	return nil
}

// probePeer reports whether this process can read the memory of the
// owner of seg: it reads the probe word whose address and value the owner
// put in its segment's control area.
func probePeer(seg *segment) bool {
	pid := int(binary.LittleEndian.Uint32(seg.mem[offPid:]))
	addr := uintptr(binary.LittleEndian.Uint64(seg.mem[offProbeAddr:]))
	want := binary.LittleEndian.Uint64(seg.mem[offProbeValue:])
	if addr == 0 || pid <= 0 {
		return false
	}
	var got [8]byte
	if readPeer(pid, addr, got[:]) != nil {
		return false
	}
	return binary.LittleEndian.Uint64(got[:]) == want
}
