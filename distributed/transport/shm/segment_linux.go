package shm

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Segment layout. A segment belongs to one receiving rank: a control area,
// then one slot per rank that sends to it (its peers, ascending), each a
// header page and a ring of ringBytes.
//
//	control area: magic u64 | version u32 | worldSize u32 | rank u32 | pid u32 | ringBytes u64
//	              slots u32 at +32 (number of slots)
//	              probe address u64 at +40, probe value u64 at +48 (a word in the
//	                owner's memory that peers read to test single copy; see probePeer)
//	              doorbell u32 at +128 (futex word the owner sleeps on)
//	              sleeping u32 at +256 (1 while the owner's progress goroutine is, or is about to be, asleep)
//	              bellFIFO u32 at +384 (1: the owner's progress goroutine sleeps on the FIFO beside
//	                the segment, which wakers write to after bumping doorbell; 0: on doorbell itself.
//	                See bell_linux.go)
//	              senders u32 × slots at +512 (the rank filling each slot, ascending)
//	              (whole pages: one for up to 896 slots)
//	slot header:  head u64 at +0   (bytes ever published by the producer)
//	              tail u64 at +128 (bytes ever consumed by the owner)
//	              space u32 at +256 (futex word a producer waiting for space sleeps on)
//	              waiting u32 at +384 (1 while the producer is, or is about to be, asleep)
//	              bell u32 at +512 (futex word a receiver waiting on this ring sleeps on)
//	              sleepers u32 at +640 (1: a receiver is, or is about to be, asleep on bell;
//	                the first producer to publish after clears it and rings)
//	              rangAt i64 at +768 (CLOCK_MONOTONIC ns when the producer last rang bell,
//	                stamped before it rings: the woken receiver measures its wake-up; see wait.go)
//	              cma u32 at +896 (1: the owner reads the producer's memory itself; see single_copy_linux.go)
//	              wakeAt u64 at +960 (the head a receiver asleep on bell waits for: the
//	                producer rings only once head reaches it)
//	              want u32 × 512 at +1024 (receivers waiting for the owner's progress
//	                goroutine to deliver a message, counted by a hash of its tag)
//
// head and tail only grow; the ring position of byte i is i mod ringBytes.
// Invariant: tail <= head <= tail + ringBytes. Fields sit 128 bytes apart so
// the two sides never share a cache line (nor an adjacent-line prefetch).
// Ranks find their slot in the sender table, so a segment costs rings only
// for the ranks that use it, whatever the size of the world.
const (
	pageBytes = 4096

	segMagic   = 0x6d68732d74726f63 // "cort-shm", little-endian
	segVersion = 5

	offMagic      = 0
	offVersion    = 8
	offWorld      = 12
	offRank       = 16
	offPid        = 20
	offRingBytes  = 24
	offSlots      = 32
	offProbeAddr  = 40
	offProbeValue = 48
	offDoorbell   = 128
	offSleeping   = 256
	offBellFIFO   = 384
	offSenders    = 512

	offHead     = 0
	offTail     = 128
	offSpace    = 256
	offWaiting  = 384
	offBell     = 512
	offSleepers = 640
	offRangAt   = 768
	offCMA      = 896
	offWakeAt   = 960
	offWant     = 1024

	// wantBuckets is the number of want counters in a slot header.
	wantBuckets = 512
)

// segment is a mapped segment file.
type segment struct {
	path      string
	mem       []byte
	worldSize int
	rank      int
	ringBytes int
	senders   []int // senders[i] fills slot i; ascending
}

// ring is one slot of a segment, seen from either side.
type ring struct {
	head, tail     *uint64
	space, waiting *uint32
	bell, sleepers *uint32
	wakeAt         *uint64
	rangAt         *int64
	cma            *uint32
	want           *[wantBuckets]uint32
	data           []byte
	mask           uint64
}

// controlBytes is the size of the control area of a segment with slots
// slots.
func controlBytes(slots int) int {
	return (offSenders + 4*slots + pageBytes - 1) / pageBytes * pageBytes
}

func segmentBytes(slots, ringBytes int) int {
	return controlBytes(slots) + slots*(pageBytes+ringBytes)
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) doorbell() *uint32 { return s.u32(offDoorbell) }
func (s *segment) sleeping() *uint32 { return s.u32(offSleeping) }
func (s *segment) bellFIFO() *uint32 { return s.u32(offBellFIFO) }

// slot returns the ring that rank sender fills; sender must be in
// s.senders.
func (s *segment) slot(sender int) ring {
	i, ok := slices.BinarySearch(s.senders, sender)
	if !ok {
		panic(fmt.Sprintf("shm: segment of rank %d has no slot for rank %d", s.rank, sender))
	}
	base := controlBytes(len(s.senders)) + i*(pageBytes+s.ringBytes)
	return ring{
		head:     s.u64(base + offHead),
		tail:     s.u64(base + offTail),
		space:    s.u32(base + offSpace),
		waiting:  s.u32(base + offWaiting),
		bell:     s.u32(base + offBell),
		sleepers: s.u32(base + offSleepers),
		wakeAt:   s.u64(base + offWakeAt),
		rangAt:   (*int64)(unsafe.Pointer(s.u64(base + offRangAt))),
		cma:      s.u32(base + offCMA),
		want:     (*[wantBuckets]uint32)(unsafe.Pointer(s.u32(base + offWant))),
		data:     s.mem[base+pageBytes : base+pageBytes+s.ringBytes : base+pageBytes+s.ringBytes],
		mask:     uint64(s.ringBytes - 1),
	}
}

// reclaimStale removes the files (segments and their sockets) that
// processes now dead left in dir under prefix: a process killed during
// setup, before its peers mapped its segment, leaves them behind. A file's
// owner is the pid in its name ("prefix-pid-rank-id"); only files whose
// owner no longer exists in this pid namespace are removed, so a live
// job's setup is never disturbed. Errors are ignored: reclaiming is best
// effort.
func reclaimStale(dir, prefix string) (removed []string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if !ok {
			continue
		}
		rest = strings.TrimSuffix(strings.TrimSuffix(rest, ".sock"), ".bell")
		f := strings.Split(rest, "-")
		if len(f) != 3 || len(f[2]) != 16 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		_, err2 := strconv.Atoi(f[1])
		_, err3 := hex.DecodeString(f[2])
		if err1 != nil || err2 != nil || err3 != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to judge)
		}
		path := filepath.Join(dir, e.Name())
		if os.Remove(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed
}

// createSegment creates and maps a fresh segment for rank in dir, with a
// slot for each of senders (ascending); probe is the word peers read to
// test single copy.
func createSegment(dir, prefix string, rank, worldSize int, senders []int, ringBytes int, probe *uint64) (*segment, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("shm: random name: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d-%d-%s", prefix, os.Getpid(), rank, hex.EncodeToString(id[:])))
	size := segmentBytes(len(senders), ringBytes)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: create segment %s: %w", path, err)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) (*segment, error) {
		unix.Unlink(path)
		return nil, fmt.Errorf("shm: %s segment %s (%d bytes): %w", what, path, size, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("size", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	s := &segment{path: path, mem: mem, worldSize: worldSize, rank: rank, ringBytes: ringBytes, senders: senders}
	prefault(mem)
	binary.LittleEndian.PutUint32(mem[offSlots:], uint32(len(senders)))
	for i, r := range senders {
		binary.LittleEndian.PutUint32(mem[offSenders+4*i:], uint32(r))
	}
	binary.LittleEndian.PutUint32(mem[offVersion:], segVersion)
	binary.LittleEndian.PutUint32(mem[offWorld:], uint32(worldSize))
	binary.LittleEndian.PutUint32(mem[offRank:], uint32(rank))
	binary.LittleEndian.PutUint32(mem[offPid:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint64(mem[offRingBytes:], uint64(ringBytes))
	binary.LittleEndian.PutUint64(mem[offProbeAddr:], uint64(uintptr(unsafe.Pointer(probe))))
	binary.LittleEndian.PutUint64(mem[offProbeValue:], *probe)
	atomic.StoreUint64(s.u64(offMagic), segMagic) // last: the header is complete
	return s, nil
}

// openSegment maps the segment at path, which must belong to rank of a
// world of worldSize and hold a slot for rank me.
func openSegment(path string, rank, worldSize, me int) (*segment, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: open segment of rank %d: %w", rank, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: stat segment of rank %d: %w", rank, err)
	}
	if st.Size < pageBytes {
		return nil, fmt.Errorf("shm: segment %s of rank %d is %d bytes, not a segment", path, rank, st.Size)
	}
	hdr, err := unix.Mmap(fd, 0, pageBytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map segment header of rank %d: %w", rank, err)
	}
	magic := atomic.LoadUint64((*uint64)(unsafe.Pointer(&hdr[offMagic])))
	version := binary.LittleEndian.Uint32(hdr[offVersion:])
	world := int(binary.LittleEndian.Uint32(hdr[offWorld:]))
	owner := int(binary.LittleEndian.Uint32(hdr[offRank:]))
	ringBytes64 := binary.LittleEndian.Uint64(hdr[offRingBytes:])
	slots := int(binary.LittleEndian.Uint32(hdr[offSlots:]))
	unix.Munmap(hdr)
	switch {
	case magic != segMagic:
		return nil, fmt.Errorf("shm: %s (rank %d's address) is not a segment", path, rank)
	case version != segVersion:
		return nil, fmt.Errorf("shm: segment of rank %d has version %d, this end speaks %d", rank, version, segVersion)
	case world != worldSize:
		return nil, fmt.Errorf("shm: segment of rank %d is for world size %d, this rank's is %d", rank, world, worldSize)
	case owner != rank:
		return nil, fmt.Errorf("shm: the address given for rank %d is rank %d's segment", rank, owner)
	case ringBytes64 < minRing || ringBytes64 > maxRing || ringBytes64&(ringBytes64-1) != 0:
		return nil, fmt.Errorf("shm: segment of rank %d has ring size %d", rank, ringBytes64)
	case slots >= worldSize:
		return nil, fmt.Errorf("shm: segment of rank %d has %d slots, more than the %d other ranks", rank, slots, worldSize-1)
	}
	ringBytes := int(ringBytes64)
	size := segmentBytes(slots, ringBytes)
	if st.Size != int64(size) {
		return nil, fmt.Errorf("shm: segment of rank %d is %d bytes, want %d", rank, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map segment of rank %d (%d bytes): %w", rank, size, err)
	}
	senders := make([]int, slots)
	for i := range senders {
		r := int(binary.LittleEndian.Uint32(mem[offSenders+4*i:]))
		if r >= worldSize || r == rank || (i > 0 && r <= senders[i-1]) {
			unix.Munmap(mem)
			return nil, fmt.Errorf("shm: segment of rank %d: bad sender table (slot %d is rank %d)", rank, i, r)
		}
		senders[i] = r
	}
	if _, ok := slices.BinarySearch(senders, me); !ok {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: segment of rank %d has no ring for rank %d: rank %d does not count it among its peers (Options.Peers)", rank, me, rank)
	}
	s := &segment{path: path, mem: mem, worldSize: worldSize, rank: rank, ringBytes: ringBytes, senders: senders}
	// Map this rank's own slot (the ring it fills) now, so that the first
	// message pays no page faults; the owner allocated the pages.
	i, _ := slices.BinarySearch(senders, me)
	base := controlBytes(slots) + i*(pageBytes+ringBytes)
	prefault(mem[base : base+pageBytes+ringBytes])
	return s, nil
}

// prefault maps every page of b (a part of a shared mapping) writable now,
// allocating the tmpfs pages that are not yet: a first touch costs a minor
// fault of about 10 µs per 4 KiB page (see the package doc), which the
// first messages through a fresh ring would otherwise pay, up to thousands
// of them. MADV_POPULATE_WRITE (Linux 5.14) allocates and maps them in one
// call without writing, and one read of each page follows: on a guest
// whose hypervisor completes a mapping only at its first access from user
// space (seen on a nested 2-vCPU KVM guest), the first access to each page
// of a populated mapping still cost 6 to 40 µs, no fault counted by the
// guest, so that a world-2 4 KiB all-reduce took 15 to 18 µs instead of
// 2.4 µs until the rings had wrapped once (about 500 ops with 2 MiB rings).
// Reading costs the same here, at setup, once. Where the madvise fails
// (older kernels) the read alone does it: the mapping is shared, so a read
// fault maps the page writable. Reading never disturbs data a peer may
// already be writing.
func prefault(b []byte) {
	if len(b) == 0 {
		return
	}
	unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	// An atomic load, which the compiler never elides; pages are
	// page-aligned, so the word is too.
	for off := 0; off < len(b); off += pageBytes {
		atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
	}
}

// unlink removes the segment's file; the mappings stay valid.
func (s *segment) unlink() error {
	if err := unix.Unlink(s.path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("shm: remove segment %s: %w", s.path, err)
	}
	return nil
}

// unmap releases the mapping; s must not be used afterwards.
func (s *segment) unmap() {
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}
