package shm

import (
	"cmp"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"time"
)

// Options configures a transport; the zero value works.
type Options struct {
	// Token is the job's shared secret, checked as in package tcp when
	// the ranks connect. Empty means no authentication beyond file
	// permissions (segments are created mode 0600).
	Token []byte
	// Dir is where segments and setup sockets are created; it should be a
	// tmpfs. "" means /dev/shm.
	Dir string
	// Prefix starts the names of this job's files: letters, digits, '.',
	// '_' and '-'. "" means "cohort".
	Prefix string
	// RingBytes is the capacity of each ring, a power of two from 64 KiB
	// to 1 GiB. 0 means DefaultRingBytes, 2 MiB: room for a message of
	// collective.Tuning.InlineBytes (1 MiB) and its header, which an
	// inline plan sends without waiting for the receiver, while the ring,
	// cycled through by every message, stays in the caches. On a 2-core
	// Intel Xeon (family 6 model 207, 2 MiB L2 per core), world 2,
	// alternated: a 16 MiB all-reduce took 2.9 ms with 2 MiB rings, 2.7 ms
	// with 1 MiB ones and 3.2 ms with 4 MiB ones. Each rank's segment
	// holds one ring per peer (worldSize−1 unless Peers says otherwise).
	RingBytes int64
	// MaxMessageBytes is the longest message accepted from a peer; a
	// longer one is a protocol error. 0 means 64 GiB.
	MaxMessageBytes int64
	// Spin is how long a receiver polls the rings itself, and a sender
	// waits for ring space, before sleeping. 0 means a time chosen from
	// what waiting costs on this machine (see wait.go and Transport.Wait):
	// a multiple of the observed futex wake-up while the ranks sharing
	// memory (this one and its peers) fit their CPUs (Options.CPUs); with
	// more ranks than CPUs, polling while yielding the CPU (sched_yield)
	// between polls when a yield is much cheaper than a wake-up, or no
	// polling at all when it is not. With more ranks than CPUs a waiter
	// also polls not at all for a while after a yield that handed the CPU
	// to some other busy process for a time slice (see yield.go).
	// Negative means never.
	Spin time.Duration
	// RendezvousBytes: messages at least this long go by single copy,
	// straight from the sender's memory into the receiver's buffer, when
	// the receiver can read the sender's memory (process_vm_readv, checked
	// at setup) and waits for the message; otherwise, and for shorter
	// messages, through the ring. Such a Send returns once the receiver
	// has read the message, or after a few milliseconds (then sending it
	// through the ring) if no receiver comes. 0 means 2 MiB, above the
	// collectives' default inline limit (whose sends and receives of a
	// rank run in turn on one goroutine); negative means never.
	RendezvousBytes int64
	// HandshakeTimeout bounds the setup handshake with one peer. 0 means 30 s.
	HandshakeTimeout time.Duration
	// Logger receives refused connections and link failures; nil discards
	// them.
	Logger *slog.Logger
	// Peers lists the ranks this rank shares memory with, by their rank
	// in the world, in any order and without this rank; nil means every
	// other rank, and an empty list none. A rank left out is out of this
	// transport's reach: Send and Recv naming it fail at once, and its
	// address is not needed. The lists must agree: rank a lists b exactly
	// when b lists a (Connect fails otherwise, naming both). A job spread
	// over several hosts lists the ranks on this host here and reaches the
	// others through another transport (see package route); rank numbers
	// stay those of the world.
	Peers []int
	// CPUs is how many CPUs the ranks sharing memory (this one and its
	// peers) may run on between them, say the union of their CPU masks
	// when a launcher binds each to its own; 0 means runtime.NumCPU(),
	// this process's.
	CPUs int

	// yield: the ranks outnumber the CPUs, and waiters may yield the CPU
	// between polls (set by withDefaults; tests may force it).
	yield bool
	// ranks and cpus: the ranks sharing memory and their CPUs (set by
	// withDefaults), for the wait plan.
	ranks, cpus int
	// noBell: the progress goroutine sleeps on the doorbell futex, not on
	// a FIFO (see bell_linux.go; tests of the fallback).
	noBell bool
}

// DefaultRingBytes is Options.RingBytes's default.
const DefaultRingBytes = 2 << 20

// The ring bounds.
const (
	minRing = 64 << 10
	maxRing = 1 << 30
)

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func (o *Options) validate() error {
	switch {
	case o.Prefix != "" && !prefixRE.MatchString(o.Prefix):
		return fmt.Errorf("shm: Options.Prefix %q: want 1 to 64 letters, digits, '.', '_' or '-'", o.Prefix)
	case o.RingBytes != 0 && (o.RingBytes < minRing || o.RingBytes > maxRing || o.RingBytes&(o.RingBytes-1) != 0):
		return fmt.Errorf("shm: Options.RingBytes %d: want a power of two in [%d, %d]", o.RingBytes, minRing, maxRing)
	case o.MaxMessageBytes < 0:
		return fmt.Errorf("shm: Options.MaxMessageBytes %d is negative", o.MaxMessageBytes)
	case o.HandshakeTimeout < 0:
		return fmt.Errorf("shm: Options.HandshakeTimeout %v is negative", o.HandshakeTimeout)
	}
	return nil
}

// withDefaults returns o with zero fields replaced by their defaults;
// ranks is the number of ranks sharing memory.
func (o Options) withDefaults(ranks int) Options {
	o.Dir = cmp.Or(o.Dir, "/dev/shm")
	o.Prefix = cmp.Or(o.Prefix, "cohort")
	o.RingBytes = cmp.Or(o.RingBytes, DefaultRingBytes)
	o.MaxMessageBytes = cmp.Or(o.MaxMessageBytes, 64<<30)
	cpus := o.CPUs
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	o.yield = o.yield || ranks > cpus
	o.ranks, o.cpus = ranks, cpus
	o.RendezvousBytes = cmp.Or(o.RendezvousBytes, 2<<20)
	o.HandshakeTimeout = cmp.Or(o.HandshakeTimeout, 30*time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
