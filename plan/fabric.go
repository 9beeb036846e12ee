package plan

import (
	"fmt"
	"strings"
)

// Fabric describes how ranks talk: an α–β model (a message of n bytes
// takes Alpha + n/Bandwidth seconds) per link class, intra-node (NVLink,
// shared memory) and inter-node (InfiniBand, TCP), optionally overridden
// per collective where a fit of `cohort bench allreduce|allgather|
// reducescatter` (or a vendor's figures) says an algorithm does better or
// worse than the links suggest.
//
// Bandwidth is what one rank gets in one direction while every rank of
// its node communicates at once: for a node of 8 GPUs with one 200 Gbit/s
// NIC each, 25e9 bytes/s inter-node.
type Fabric struct {
	Name  string `json:"name"`
	Intra *Link  `json:"intra"`
	Inter *Link  `json:"inter"`
	// Collectives overrides a link class's figures for one collective:
	// {"allreduce": {"inter": {...}}}. Keys: allreduce, allgather,
	// reducescatter, p2p.
	Collectives map[string]map[string]*Link `json:"collectives,omitempty"`
	Source      string                      `json:"source,omitempty"`
}

// Link is one α–β pair, and optionally a second β for the bytes of a
// collective beyond a size (Beyond).
type Link struct {
	Transport string   `json:"transport,omitempty"` // nvlink, shm, ib, tcp: documentation
	Alpha     *float64 `json:"alpha"`               // seconds per message step
	Bandwidth *float64 `json:"bandwidth"`           // bytes/s per rank, one direction
	// Beyond, where set, prices the bytes of a collective's buffer past
	// Beyond.Bytes at Beyond.Bandwidth instead (messages that no longer
	// fit the caches move slower): a buffer of n bytes moves
	// min(n, B)/β + max(0, n − B)/β₂ per byte of the ring's factor. A
	// fabric without it (older files) prices every byte at Bandwidth.
	Beyond *Segment `json:"beyond,omitempty"`
}

// Segment is the second β of a Link.
type Segment struct {
	Bytes     float64 `json:"bytes"`     // the break: a collective's buffer size
	Bandwidth float64 `json:"bandwidth"` // bytes/s for the bytes past it
}

// cost is a link's figures, resolved.
type cost struct {
	alpha, beta float64
	brk, beta2  float64 // brk 0: one β
}

// perByte returns the seconds to move a buffer of bytes once at the
// link's bandwidth(s).
func (c cost) perByte(bytes float64) float64 {
	if c.brk <= 0 || bytes <= c.brk {
		return bytes / c.beta
	}
	return c.brk/c.beta + (bytes-c.brk)/c.beta2
}

// Collective names the collectives a Fabric can price.
const (
	AllReduce     = "allreduce"
	AllGather     = "allgather"
	ReduceScatter = "reducescatter"
	P2P           = "p2p"
)

var linkClasses = []string{"intra", "inter"}

// Validate names the first missing, negative, zero (bandwidth) or
// non-finite figure.
func (f *Fabric) Validate() error {
	check := func(field string, l *Link) error {
		if l == nil {
			return fmt.Errorf("plan: fabric %s: %s is missing: want {\"alpha\": seconds, \"bandwidth\": bytes/s}", f.Name, field)
		}
		switch {
		case l.Alpha == nil:
			return fmt.Errorf("plan: fabric %s: %s.alpha is missing: want seconds >= 0", f.Name, field)
		case !nonNegative(*l.Alpha):
			return fmt.Errorf("plan: fabric %s: %s.alpha is %v: want seconds >= 0", f.Name, field, *l.Alpha)
		case l.Bandwidth == nil:
			return fmt.Errorf("plan: fabric %s: %s.bandwidth is missing: want bytes/s > 0", f.Name, field)
		case !positive(*l.Bandwidth):
			return fmt.Errorf("plan: fabric %s: %s.bandwidth is %v: want bytes/s > 0", f.Name, field, *l.Bandwidth)
		case l.Beyond != nil && !positive(l.Beyond.Bytes):
			return fmt.Errorf("plan: fabric %s: %s.beyond.bytes is %v: want bytes > 0", f.Name, field, l.Beyond.Bytes)
		case l.Beyond != nil && !positive(l.Beyond.Bandwidth):
			return fmt.Errorf("plan: fabric %s: %s.beyond.bandwidth is %v: want bytes/s > 0", f.Name, field, l.Beyond.Bandwidth)
		}
		return nil
	}
	if err := check("intra", f.Intra); err != nil {
		return err
	}
	if err := check("inter", f.Inter); err != nil {
		return err
	}
	for _, op := range sortedKeys(f.Collectives) {
		switch op {
		case AllReduce, AllGather, ReduceScatter, P2P:
		default:
			return fmt.Errorf("plan: fabric %s: collectives.%s: unknown collective (want allreduce, allgather, reducescatter or p2p)", f.Name, op)
		}
		for _, class := range sortedKeys(f.Collectives[op]) {
			if class != "intra" && class != "inter" {
				return fmt.Errorf("plan: fabric %s: collectives.%s.%s: unknown link class (want intra or inter)", f.Name, op, class)
			}
			if err := check("collectives."+op+"."+class, f.Collectives[op][class]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ParseFabric reads a fabric description from JSON and validates it.
func ParseFabric(data []byte) (*Fabric, error) {
	var f Fabric
	if err := strictDecode(data, &f); err != nil {
		return nil, fmt.Errorf("plan: fabric: %w", err)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// BuiltinFabric returns a fabric kept in the repository (plan/fabrics).
func BuiltinFabric(name string) (*Fabric, error) {
	data, err := builtin.ReadFile("fabrics/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("plan: unknown fabric %q (have %s, or a --fabric file)", name, strings.Join(builtinNames("fabrics"), ", "))
	}
	return ParseFabric(data)
}

// link returns the figures for op over a link class.
func (f *Fabric) link(op string, inter bool) cost {
	class, l := "intra", f.Intra
	if inter {
		class, l = "inter", f.Inter
	}
	if o := f.Collectives[op][class]; o != nil {
		l = o
	}
	c := cost{alpha: *l.Alpha, beta: *l.Bandwidth}
	if l.Beyond != nil {
		c.brk, c.beta2 = l.Beyond.Bytes, l.Beyond.Bandwidth
	}
	return c
}

// Group is where the ranks of a process group sit: PerNode of them on each
// of Nodes nodes (PerNode·Nodes ranks).
type Group struct{ PerNode, Nodes int }

// Size returns the group's rank count.
func (g Group) Size() int { return g.PerNode * g.Nodes }

// ring returns the time of a flat ring over n ranks: steps message steps
// each moving bytes·frac.
func ringTime(c cost, n int, bytes float64, passes float64) float64 {
	if n <= 1 || bytes <= 0 {
		return 0
	}
	fn := float64(n)
	return passes * ((fn-1)/fn*c.perByte(bytes) + (fn-1)*c.alpha)
}

// AllReduceTime prices a ring all-reduce of bytes over g:
// 2(n−1)/n·bytes/β + 2(n−1)α on one link class; across nodes
// hierarchically: a reduce-scatter inside each node, PerNode parallel
// all-reduces of bytes/PerNode between nodes (one per local rank, each
// over its own share of the node's links), and an all-gather inside the
// node.
func (f *Fabric) AllReduceTime(g Group, bytes float64) float64 {
	if g.Nodes <= 1 {
		return ringTime(f.link(AllReduce, false), g.PerNode, bytes, 2)
	}
	ci, ce := f.link(AllReduce, false), f.link(AllReduce, true)
	return ringTime(ci, g.PerNode, bytes, 1) +
		ringTime(ce, g.Nodes, bytes/float64(g.PerNode), 2) +
		ringTime(ci, g.PerNode, bytes, 1)
}

// AllGatherTime prices a ring all-gather whose result is bytes (each rank
// contributes bytes/n): (n−1)/n·bytes/β + (n−1)α, hierarchical across
// nodes (between nodes, then inside). ReduceScatterTime is its mirror.
func (f *Fabric) AllGatherTime(g Group, bytes float64) float64 {
	return f.halfRing(AllGather, g, bytes)
}

// ReduceScatterTime prices a ring reduce-scatter of bytes (see AllGatherTime).
func (f *Fabric) ReduceScatterTime(g Group, bytes float64) float64 {
	return f.halfRing(ReduceScatter, g, bytes)
}

func (f *Fabric) halfRing(op string, g Group, bytes float64) float64 {
	if g.Nodes <= 1 {
		return ringTime(f.link(op, false), g.PerNode, bytes, 1)
	}
	return ringTime(f.link(op, true), g.Nodes, bytes/float64(g.PerNode), 1) + ringTime(f.link(op, false), g.PerNode, bytes, 1)
}

// P2PTime prices one point-to-point message: α + bytes/β (the bytes past
// a second β's break at that β).
func (f *Fabric) P2PTime(inter bool, bytes float64) float64 {
	c := f.link(P2P, inter)
	return c.alpha + c.perByte(bytes)
}
