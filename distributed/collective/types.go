package collective

import (
	"fmt"
	"strings"
)

// DType is the element type of a collective's buffers (package distributed
// exports it as distributed.DType).
type DType uint8

const (
	Float32 DType = iota
	Float64
	Int64
	BFloat16
	Float16
	numDTypes
)

var dtypeNames = [...]string{"float32", "float64", "int64", "bfloat16", "float16"}

func (d DType) String() string { return name(d, dtypeNames[:], "dtype") }

// Size returns the size of one element in bytes (0 for an unknown dtype).
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float64, Int64:
		return 8
	case BFloat16, Float16:
		return 2
	}
	return 0
}

// Op combines elements in reductions (package distributed exports it as
// distributed.ReduceOp). Avg is Sum followed by a division by the number of ranks
// (truncating for Int64).
type Op uint8

const (
	Sum Op = iota
	Avg
	Max
	Min
	Prod
	numOps
)

var opNames = [...]string{"sum", "avg", "max", "min", "prod"}

func (o Op) String() string { return name(o, opNames[:], "op") }

// Kind names a collective (or point-to-point) operation.
type Kind uint8

const (
	AllReduce Kind = iota
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	AllToAll
	Gather
	Scatter
	Barrier
	Send
	Recv
	// Agree is a barrier that also checks that every rank passed the same
	// Count and Root; the native backend uses it to agree on a new subgroup.
	Agree
	numKinds
)

var kindNames = [...]string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
	"alltoall", "gather", "scatter", "barrier", "send", "recv", "agree"}

func (k Kind) String() string { return name(k, kindNames[:], "kind") }

// reduces reports whether the kind combines values with an Op.
func (k Kind) reduces() bool { return k == AllReduce || k == Reduce || k == ReduceScatter }

// rooted reports whether the kind has a root rank.
func (k Kind) rooted() bool { return k == Broadcast || k == Reduce || k == Gather || k == Scatter }

// Call describes one operation as every rank issues it. It is the
// fingerprint that desync detection compares across ranks, and (with the
// group size and the rank) all a plan depends on.
//
// Count is in elements and means, by kind:
//   - AllReduce, Broadcast, Reduce, Send, Recv: the length of the buffer;
//   - AllGather, Gather: the length of each rank's input (the output holds
//     size·Count elements);
//   - ReduceScatter, Scatter: the length of each rank's output (the input
//     holds size·Count elements);
//   - AllToAll: the length of one chunk (input and output hold size·Count);
//   - Barrier: 0.
//
// Root is the root rank of rooted kinds; Peer and Tag identify the other
// side and the stream of a Send or Recv.
type Call struct {
	Kind  Kind
	DType DType
	Op    Op
	Count int
	Root  int
	Peer  int
	Tag   int
}

func (c Call) String() string {
	var b strings.Builder
	b.WriteString(c.Kind.String())
	b.WriteByte('(')
	switch c.Kind {
	case Barrier:
	case Agree:
		fmt.Fprintf(&b, "%d, %d", c.Count, c.Root)
	default:
		fmt.Fprintf(&b, "%v×%d", c.DType, c.Count)
	}
	if c.Kind.reduces() {
		fmt.Fprintf(&b, ", %v", c.Op)
	}
	if c.Kind.rooted() {
		fmt.Fprintf(&b, ", root %d", c.Root)
	}
	switch c.Kind {
	case Send:
		fmt.Fprintf(&b, ", to %d, tag %d", c.Peer, c.Tag)
	case Recv:
		fmt.Fprintf(&b, ", from %d, tag %d", c.Peer, c.Tag)
	}
	b.WriteByte(')')
	return b.String()
}

// validate checks the call against the group size.
func (c Call) validate(size int) error {
	if c.Kind >= numKinds {
		return fmt.Errorf("collective: unknown kind %d", uint8(c.Kind))
	}
	if c.Kind != Barrier && c.Kind != Agree && c.DType.Size() == 0 {
		return fmt.Errorf("collective: %v: unknown dtype %d", c.Kind, uint8(c.DType))
	}
	if c.Kind.reduces() && c.Op >= numOps {
		return fmt.Errorf("collective: %v: unknown reduce op %d", c.Kind, uint8(c.Op))
	}
	if c.Count < 0 {
		return fmt.Errorf("collective: %v: negative count %d", c.Kind, c.Count)
	}
	if c.Kind.rooted() && (c.Root < 0 || c.Root >= size) {
		return fmt.Errorf("collective: %v: root %d out of range [0, %d)", c.Kind, c.Root, size)
	}
	if (c.Kind == Send || c.Kind == Recv) && (c.Peer < 0 || c.Peer >= size) {
		return fmt.Errorf("collective: %v: peer %d out of range [0, %d)", c.Kind, c.Peer, size)
	}
	return nil
}

// InLen and OutLen return the element counts of the input and output
// buffers a call needs on a group of size ranks. In-place kinds (AllReduce,
// Broadcast, Reduce, Send, Recv) use only the output buffer; InLen is 0.
func (c Call) InLen(size int) int {
	switch c.Kind {
	case AllGather, Gather:
		return c.Count
	case ReduceScatter, Scatter, AllToAll:
		return size * c.Count
	}
	return 0
}

// OutLen: see InLen.
func (c Call) OutLen(size int) int {
	switch c.Kind {
	case AllReduce, Broadcast, Reduce, Send, Recv, ReduceScatter, Scatter:
		return c.Count
	case AllGather, Gather, AllToAll:
		return size * c.Count
	}
	return 0
}

// Buf names one of the buffers a plan works on.
type Buf uint8

const (
	// Out is the output (and, for in-place kinds, the only) buffer.
	Out Buf = iota
	// In is the input of kinds with separate input and output.
	In
	// Tmp is scratch memory owned by the executor, Plan.TmpLen elements.
	Tmp
)

var bufNames = [...]string{"out", "in", "tmp"}

func (b Buf) String() string { return name(b, bufNames[:], "buf") }

// Region is a range of elements [Off, Off+Len) of one buffer.
type Region struct {
	Buf      Buf
	Off, Len int
}

func (r Region) String() string { return fmt.Sprintf("%v[%d:%d]", r.Buf, r.Off, r.Off+r.Len) }

func (r Region) end() int { return r.Off + r.Len }

// overlaps reports whether two regions share an element.
func (r Region) overlaps(o Region) bool {
	return r.Buf == o.Buf && r.Len > 0 && o.Len > 0 && r.Off < o.end() && o.Off < r.end()
}

// sub returns the part [off, off+n) of r, relative to r's start.
func (r Region) sub(off, n int) Region { return Region{r.Buf, r.Off + off, n} }

// StepKind is what a Step does.
type StepKind uint8

const (
	// StepSend sends Src to Peer as message Msg.
	StepSend StepKind = iota
	// StepRecv receives message Msg from Peer into Dst.
	StepRecv
	// StepReduce sets Dst = Src ⊕ Src2 element-wise, with the call's Op
	// (Sum for Avg). Dst may alias Src or Src2 exactly.
	StepReduce
	// StepCopy sets Dst = Src.
	StepCopy
	// StepAvg divides Dst by the group size (Avg's final step).
	StepAvg
)

var stepNames = [...]string{"send", "recv", "reduce", "copy", "avg"}

func (k StepKind) String() string { return name(k, stepNames[:], "step") }

// Step is one action of one rank. Send and Recv name a peer (a rank of the
// group) and a message number, unique within the op for each ordered pair
// of ranks; a Send on one rank matches the Recv with the same message
// number on its peer, and both have the same length.
type Step struct {
	Kind StepKind
	Peer int
	Msg  uint32
	Dst  Region
	Src  Region
	Src2 Region
}

func (s Step) String() string {
	switch s.Kind {
	case StepSend:
		return fmt.Sprintf("send   to %d msg %d %v", s.Peer, s.Msg, s.Src)
	case StepRecv:
		return fmt.Sprintf("recv   from %d msg %d %v", s.Peer, s.Msg, s.Dst)
	case StepReduce:
		return fmt.Sprintf("reduce %v = %v ⊕ %v", s.Dst, s.Src, s.Src2)
	case StepCopy:
		return fmt.Sprintf("copy   %v = %v", s.Dst, s.Src)
	case StepAvg:
		return fmt.Sprintf("avg    %v", s.Dst)
	}
	return s.Kind.String()
}

// Plan is the list of steps one rank performs for one call: a pure function
// of the call, the group size, the rank and the tuning. Executing every
// rank's plan (in step order on each rank, messages matched by peer and
// message number) completes the call.
type Plan struct {
	Algo   string
	Call   Call
	Size   int
	Rank   int
	TmpLen int // elements of scratch memory the steps use
	Steps  []Step
	// InOrder: the plans of all ranks complete when each runs its steps
	// strictly in order with blocking receives, provided sends do not
	// wait for the receiver.
	InOrder bool
	// Inline: InOrder and every message is at most Tuning.InlineBytes, so
	// the executor runs the plan on the caller's goroutine. An inline plan
	// that starts with a send prepends its op header to that message, and
	// CombinedFrom lists the peers whose first message to this rank does
	// so (their headers do not travel alone).
	Inline       bool
	CombinedFrom []int

	// Who exchanges op headers with this rank (see checkPeers), worked
	// out once with the plan.
	announce, check []int
	left            int
	// folds[i]: step i is a receive the executor may fold into the
	// reduce after it (see foldable); nil when none is.
	folds []bool
}

// String renders the plan one step per line; the text goldens use it.
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %s rank %d/%d tmp %d", p.Call, p.Algo, p.Rank, p.Size, p.TmpLen)
	if p.Inline {
		b.WriteString(" inline")
		if len(p.CombinedFrom) > 0 {
			fmt.Fprintf(&b, " combined-from %v", p.CombinedFrom)
		}
	} else if p.InOrder {
		b.WriteString(" in-order")
	}
	b.WriteString("\n")
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "%4d %v", i, s)
		if p.folds != nil && p.folds[i] {
			b.WriteString(" folded")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// name returns v's name in names (one per value, in order), or kind(v)
// for a value out of range.
func name[T ~uint8](v T, names []string, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}
