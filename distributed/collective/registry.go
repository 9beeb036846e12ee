package collective

import (
	"fmt"
	"strings"
)

// The plan registry: every algorithm by kind and name, the tuning knobs,
// and the choice among them (Choose). NewPlan looks an algorithm up here
// and hands it to the builder (builder.go), which turns it into one
// rank's steps; each algorithm's own builder function lives in its file
// (allreduce_ring.go, …).

// Tuning sets the knobs plans depend on. The zero value selects defaults.
type Tuning struct {
	// SegmentBytes is the size of the pieces large transfers are cut into
	// so that receiving one piece overlaps with reducing or forwarding the
	// previous one (or, in a ring plan run inline, so that each message
	// fits InlineBytes). 0 picks half of each rank's share of the payload
	// (Count/size elements), kept within [256 KiB, 4 MiB] and, for the
	// ring plans run inline, at most 512 KiB and InlineBytes. Per-message costs (wake-ups, system
	// calls) outweigh finer pipelining when ranks share few cores: on 2
	// cores, 4 MiB pieces of a 16 MiB all-reduce through the link
	// goroutines beat 256 KiB ones by about 1.4× over shm and 2× over tcp.
	SegmentBytes int64
	// Depth is the number of segments a rank receives ahead of the one it
	// is working on; scratch memory holds Depth+1 segments (default 2).
	Depth int
	// SmallBytes: all-reduce, broadcast, reduce, all-gather and
	// reduce-scatter of at most this many bytes use latency-optimal
	// algorithms (default 64 KiB).
	SmallBytes int64
	// MediumBytes: all-reduces above SmallBytes and at most this many bytes
	// use recursive halving-doubling when the group has more than two
	// ranks; larger ones use the ring (default 512 KiB).
	MediumBytes int64
	// DoublingBytes: on more than two ranks, only all-reduces of at most
	// this many bytes use recursive doubling (default 4 KiB); larger ones,
	// up to MediumBytes, use halving-doubling, which moves 2(n−1)/n of
	// the buffer per rank instead of log2(n) times it. (On two ranks both
	// move the buffer once and doubling sends half the messages, so
	// SmallBytes bounds it there.) Four ranks on two cores of an Intel
	// Xeon (family 6 model 207), shm, medians of 5 alternated runs,
	// doubling against halving-doubling: 18 against 29 µs at 2 KiB, 24
	// against 28 at 4 KiB, 34 against 29 at 8 KiB, 60 against 40 at
	// 16 KiB, 78 against 46 at 32 KiB, 70 against 65 at 64 KiB.
	DoublingBytes int64
	// InlineBytes: a plan that may run strictly in order and whose
	// messages are at most this long runs on the caller's goroutine, with
	// no hand-offs (default 1 MiB; negative disables). The ring plans of
	// all-reduce, all-gather and reduce-scatter qualify at any size when
	// their segments fit, and run segment by segment. Transports must
	// complete a Send of that size without waiting for the peer's Recv.
	// On two ranks, all-reduces up to this size use halving-doubling, and
	// all-gathers and reduce-scatters the direct exchange (the ring's
	// messages, unsegmented), so that they run inline. Keep it below what
	// the transport holds without a receiver: shm's 2 MiB ring takes a
	// message of 2 MiB less its header, and a longer inline message is
	// drained by the receiver's progress goroutine instead (16 MiB
	// all-reduce, world 2, 2 MiB segments inline: 68 ms, against 2.7 ms
	// with the defaults).
	InlineBytes int64
}

const (
	minAutoSegment = 256 << 10
	maxAutoSegment = 4 << 20
	// maxInlineSegment caps the automatic segment of a ring plan run
	// inline: a segment is copied into the transport and out again while
	// it is still in the caches. On a 2-core AMD EPYC (Zen 5, 1 MiB L2
	// per core), 16 MiB all-reduce, alternated: shm world 2 1.57 ms with
	// 512 KiB segments against 2.27 ms with 1 MiB ones, shm world 4
	// 6.3 ms against 8.8 ms, tcp world 2 6.7 ms against 8.9 ms.
	maxInlineSegment     = 512 << 10
	defaultDepth         = 2
	defaultSmallBytes    = 64 << 10
	defaultMediumBytes   = 512 << 10
	defaultDoublingBytes = 4 << 10
	defaultInlineBytes   = DefaultInlineBytes
)

// DefaultInlineBytes is Tuning.InlineBytes's default. A transport that
// carries inline plans must take a message this long (plus headers)
// without waiting for the receiver (shm's default ring is sized for it).
const DefaultInlineBytes = 1 << 20

func (t Tuning) withDefaults() Tuning {
	if t.Depth <= 0 {
		t.Depth = defaultDepth
	}
	if t.SmallBytes <= 0 {
		t.SmallBytes = defaultSmallBytes
	}
	if t.MediumBytes <= 0 {
		t.MediumBytes = defaultMediumBytes
	}
	if t.DoublingBytes <= 0 {
		t.DoublingBytes = defaultDoublingBytes
	}
	if t.InlineBytes == 0 {
		t.InlineBytes = defaultInlineBytes
	}
	return t
}

// algorithm is one entry of the plan registry. inOrder marks algorithms
// whose plans are deadlock-free when every rank runs its steps strictly in
// order with blocking receives (sends completing without the receiver);
// the simulator checks the claim.
type algorithm struct {
	kind    Kind
	name    string
	build   func(b *builder)
	inOrder bool
	// segmented: the plan cuts its transfers into segments through
	// emitSegmented, and runs in order when built so.
	segmented bool
}

// algorithms lists every plan builder; the first entry of a kind is its
// default when Choose has no better rule. The table is read-only.
var algorithms = []algorithm{
	{AllReduce, "ring", allReduceRing, false, true},
	{AllReduce, "recursive_doubling", allReduceRecursiveDoubling, true, false},
	{AllReduce, "halving_doubling", allReduceHalvingDoubling, true, false},
	{AllReduce, "direct", allReduceDirect, true, false},
	{Broadcast, "chain", broadcastChain, true, false},
	{Broadcast, "tree", broadcastTree, true, false},
	{Reduce, "chain", reduceChain, true, false},
	{Reduce, "tree", reduceTree, true, false},
	{AllGather, "ring", allGatherRing, false, true},
	{AllGather, "direct", allGatherDirect, true, false},
	{ReduceScatter, "ring", reduceScatterRing, false, true},
	{ReduceScatter, "direct", reduceScatterDirect, true, false},
	{AllToAll, "pairwise", allToAllPairwise, true, false},
	{Gather, "direct", gatherDirect, true, false},
	{Scatter, "direct", scatterDirect, true, false},
	{Barrier, "dissemination", barrierDissemination, true, false},
	{Agree, "dissemination", barrierDissemination, true, false},
	{Send, "direct", sendDirect, true, false},
	{Recv, "direct", recvDirect, true, false},
}

// Algorithms returns the names of the algorithms available for a kind.
func Algorithms(k Kind) []string {
	var names []string
	for _, a := range algorithms {
		if a.kind == k {
			names = append(names, a.name)
		}
	}
	return names
}

// Choose picks the algorithm for a call on a group of size ranks: the
// latency-optimal one for small payloads, the bandwidth-optimal one for
// large ones. Every rank makes the same choice from the same inputs.
func Choose(c Call, size int, t Tuning) string {
	t = t.withDefaults()
	bytes := int64(c.Count) * int64(c.DType.Size())
	switch c.Kind {
	case AllReduce:
		switch {
		case bytes <= min(t.SmallBytes, t.DoublingBytes) || size == 2 && bytes <= t.SmallBytes:
			return "recursive_doubling"
		case bytes <= t.MediumBytes && size > 2, size == 2 && bytes <= t.InlineBytes:
			return "halving_doubling"
		}
		return "ring"
	case Broadcast, Reduce:
		if bytes <= t.SmallBytes || size == 2 {
			return "tree"
		}
		return "chain"
	case AllGather, ReduceScatter:
		// On two ranks the ring and the direct exchange move the same
		// messages; the direct one may run inline.
		if bytes*int64(size) <= t.SmallBytes || size == 2 && bytes <= t.InlineBytes {
			return "direct"
		}
		return "ring"
	}
	return Algorithms(c.Kind)[0]
}

// NewPlan builds rank's plan for call c on a group of size ranks with the
// named algorithm ("" lets Choose pick). It is a pure function: every rank
// calling it with the same call, size, algorithm and tuning gets plans that
// fit together.
func NewPlan(c Call, size, rank int, algo string, t Tuning) (*Plan, error) {
	if size < 1 {
		return nil, fmt.Errorf("collective: group size %d < 1", size)
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("collective: rank %d out of range [0, %d)", rank, size)
	}
	if c.Kind == Barrier || c.Kind == Agree {
		c.DType, c.Op = Float32, Sum
	}
	if err := c.validate(size); err != nil {
		return nil, err
	}
	if algo == "" {
		algo = Choose(c, size, t)
	}
	for _, a := range algorithms {
		if a.kind == c.Kind && a.name == algo {
			p := build(a, c, size, rank, t.withDefaults())
			if p.Inline {
				p.CombinedFrom = combinedFrom(a, p, t.withDefaults())
				p.folds = foldable(p.Steps)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("collective: no %v algorithm %q (have %s)", c.Kind, algo, strings.Join(Algorithms(c.Kind), ", "))
}
