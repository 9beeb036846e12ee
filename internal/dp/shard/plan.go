package shard

import (
	"fmt"
	"strings"
)

// Align is the alignment, in elements, of every parameter slot and every
// shard in a shard plan's flat buffer: 16 float32s, one 64-byte cache line
// (the same slots ddp's bucket plans use).
const Align = 16

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// Plan lays buckets of parameters out in one flat buffer and splits every
// bucket into World equal contiguous shards, one per rank.
//
// Invariants: Buckets[k] covers [Start, End) of the flat buffer, with
// Buckets[k].End == Buckets[k+1].Start; End − Start is a multiple of
// Align·World, so each rank's shard of a bucket has exactly Shard
// elements, a multiple of Align (rank r owns [Start + r·Shard,
// Start + (r+1)·Shard)); inside a bucket the parameters follow each other
// in bucket order, each starting on a multiple of Align, zero padding
// after each and at the end of the bucket; Offset[i] is parameter i's
// first element in the flat buffer, or −1 when it is in no bucket.
type Plan struct {
	World   int
	Buckets []Bucket
	Offset  []int
	Numel   []int // element count of every parameter
}

// Bucket is one bucket of a Plan.
type Bucket struct {
	Params     []int // parameter indices, in layout order
	Start, End int   // element range in the flat buffer, padding included
	Shard      int   // elements per rank: (End − Start)/World
}

// ShardRange returns rank's element range of bucket b in the flat buffer.
func (b Bucket) ShardRange(rank int) (lo, hi int) {
	return b.Start + rank*b.Shard, b.Start + (rank+1)*b.Shard
}

// Piece is the part of one parameter that falls in one rank's shard.
type Piece struct {
	Param  int // parameter index
	Bucket int
	Flat   int // first element in the flat buffer
	Lo     int // first element inside the parameter (row-major)
	Len    int // number of elements, > 0
}

// Len returns the flat buffer's length.
func (p Plan) Len() int {
	if len(p.Buckets) == 0 {
		return 0
	}
	return p.Buckets[len(p.Buckets)-1].End
}

// ClearPadding zeroes the padding of bucket k in buf, a buffer laid out
// as the bucket ([Start, End) of the flat buffer): what lies after each
// parameter and at the bucket's end.
func (p Plan) ClearPadding(k int, buf []float32) {
	b := p.Buckets[k]
	at := 0
	for _, i := range b.Params {
		off := p.Offset[i] - b.Start
		clear(buf[at:off])
		at = off + p.Numel[i]
	}
	clear(buf[at : b.End-b.Start])
}

// ClearShards zeroes, in shards (a rank's shards in bucket order), the
// shard of every bucket k with unset[k] and clears the mark: the sharded
// wrappers' gradient shards that no reduce-scatter has written since
// ZeroGrad, before something reads them.
func (p Plan) ClearShards(shards []float32, unset []bool) {
	for k, u := range unset {
		if u {
			at := p.ShardOffset(k)
			clear(shards[at : at+p.Buckets[k].Shard])
			unset[k] = false
		}
	}
}

// ReduceDst returns where a reduce-scatter of bucket k into its shard out
// goes, and marks the shard set: out itself when unset[k] (nothing since
// ZeroGrad: the reduction writes over it), else a scratch shard whose
// values are then added to out (wrapcore.Accumulate; a second
// synchronised backward pass accumulates, as in PyTorch).
func (p Plan) ReduceDst(k int, out []float32, unset []bool) []float32 {
	dst := out
	if !unset[k] {
		dst = make([]float32, p.Buckets[k].Shard)
	}
	unset[k] = false
	return dst
}

// ShardLen returns the number of elements one rank owns (padding included).
func (p Plan) ShardLen() int {
	n := 0
	for _, b := range p.Buckets {
		n += b.Shard
	}
	return n
}

// ShardOffset returns where bucket k's shard starts in a rank's
// concatenation of its shards (bucket order).
func (p Plan) ShardOffset(k int) int {
	n := 0
	for _, b := range p.Buckets[:k] {
		n += b.Shard
	}
	return n
}

// Pieces lists, in flat-buffer order, the non-empty parts of parameters
// that fall in rank's shards.
func (p Plan) Pieces(rank int) []Piece {
	var out []Piece
	for k, b := range p.Buckets {
		lo, hi := b.ShardRange(rank)
		for _, i := range b.Params {
			s, e := max(lo, p.Offset[i]), min(hi, p.Offset[i]+p.Numel[i])
			if s < e {
				out = append(out, Piece{Param: i, Bucket: k, Flat: s, Lo: s - p.Offset[i], Len: e - s})
			}
		}
	}
	return out
}

// PlanShards lays out parameters (numel[i] elements each) in the given
// buckets (parameter indices in layout order; a parameter in none is not
// sharded) for a group of world ranks. PlanShards is a pure function; it
// returns an error for a world below 1, an index out of range, a
// negative size or a parameter listed twice.
func PlanShards(numel []int, buckets [][]int, world int) (Plan, error) {
	if world < 1 {
		return Plan{}, fmt.Errorf("shard: shard plan for world size %d", world)
	}
	p := Plan{World: world, Offset: make([]int, len(numel)), Numel: append([]int(nil), numel...)}
	for i := range p.Offset {
		p.Offset[i] = -1
	}
	end := 0
	for k, params := range buckets {
		b := Bucket{Params: append([]int(nil), params...), Start: end}
		at := end
		for _, i := range params {
			switch {
			case i < 0 || i >= len(numel):
				return Plan{}, fmt.Errorf("shard: bucket %d names parameter %d of %d", k, i, len(numel))
			case numel[i] < 0:
				return Plan{}, fmt.Errorf("shard: parameter %d has negative size %d", i, numel[i])
			case p.Offset[i] >= 0:
				return Plan{}, fmt.Errorf("shard: parameter %d is listed twice", i)
			}
			p.Offset[i] = at
			at = alignUp(at+numel[i], Align)
		}
		b.End = b.Start + alignUp(at-b.Start, Align*world)
		b.Shard = (b.End - b.Start) / world
		p.Buckets = append(p.Buckets, b)
		end = b.End
	}
	return p, nil
}

// String renders the plan: one line per bucket, then each rank's shard
// and the parameter pieces in it ("param 3 [0,10) at 96").
func (p Plan) String() string {
	var s strings.Builder
	for k, b := range p.Buckets {
		fmt.Fprintf(&s, "bucket %d params=%v range=[%d,%d) shard=%d\n", k, b.Params, b.Start, b.End, b.Shard)
		for r := range p.World {
			lo, hi := b.ShardRange(r)
			fmt.Fprintf(&s, "  rank %d [%d,%d):", r, lo, hi)
			n := 0
			for _, pc := range p.Pieces(r) {
				if pc.Bucket != k {
					continue
				}
				fmt.Fprintf(&s, " param %d [%d,%d) at %d;", pc.Param, pc.Lo, pc.Lo+pc.Len, pc.Flat)
				n += pc.Len
			}
			fmt.Fprintf(&s, " %d elements\n", n)
		}
	}
	return s.String()
}
