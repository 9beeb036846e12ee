package ddp

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
)

// HalfFormat is a 16-bit floating-point wire format.
type HalfFormat int

const (
	// FP16 is IEEE 754 binary16: 11 significant bits, range ±65504.
	FP16 HalfFormat = iota
	// BF16 is bfloat16: 8 significant bits, float32's range.
	BF16
)

func (f HalfFormat) String() string {
	switch f {
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("HalfFormat(%d)", int(f))
}

// CompressHook halves the bytes on the wire: each rank divides its bucket
// by Bucket.Divisor in float32, rounds it to the 16-bit format (nearest,
// ties to even) and the group sums the 16-bit values; the sum is widened
// back into the bucket. The average therefore carries the format's
// rounding: a relative error of about 2⁻¹¹ (fp16) or 2⁻⁸ (bf16) per
// element, plus the reduction's own: the process group reduces 16-bit
// payloads by widening to float32, combining and rounding back at each
// step of its algorithm. FP16 also flushes
// magnitudes below about 6e-8 to zero and overflows above 65504; BF16 has
// float32's range. Rounding happens even in a group of one, so results do
// not depend on the world size.
//
// With ViaAllGather the 16-bit payloads are all-gathered instead and every
// rank sums the widened values in float32, in rank order: the same bytes
// on the wire per rank for two ranks, more for larger groups, but only one
// rounding (the compression itself) and no need for the backend to reduce
// 16-bit floats.
type CompressHook struct {
	Format       HalfFormat
	ViaAllGather bool

	wire   map[int][]uint16 // per-bucket scratch, reused across steps
	gather map[int][]uint16
}

// NewFP16Hook returns a CommHook that reduces buckets in fp16.
func NewFP16Hook() *CompressHook { return &CompressHook{Format: FP16} }

// NewBF16Hook returns a CommHook that reduces buckets in bf16.
func NewBF16Hook() *CompressHook { return &CompressHook{Format: BF16} }

// Start implements CommHook.
func (h *CompressHook) Start(ctx context.Context, pg distributed.ProcessGroup, b *Bucket) Reduction {
	enc, dec := distributed.FP16FromFloat32, distributed.FP16ToFloat32
	wrap := distributed.FP16
	if h.Format == BF16 {
		enc, dec, wrap = distributed.BF16FromFloat32, distributed.BF16ToFloat32, distributed.BF16
	}
	n := len(b.Grad)
	wire := scratch16(&h.wire, b.Index, n)
	inv := 1 / float32(b.Divisor)
	exact := b.Divisor&(b.Divisor-1) == 0 // reciprocal of a power of two is exact
	for i, g := range b.Grad {
		if exact {
			g *= inv
		} else {
			g /= float32(b.Divisor)
		}
		wire[i] = enc(g)
	}
	grad := b.Grad
	world := pg.Size()
	if world == 1 {
		for i, w := range wire {
			grad[i] = dec(w)
		}
		return newDoneReduction()
	}
	if !h.ViaAllGather {
		w := pg.AllReduce(ctx, wrap(wire), distributed.Sum)
		return &workReduction{work: w, finish: func() error {
			if err := w.Wait(); err != nil {
				return fmt.Errorf("ddp: bucket %d: %v all-reduce of %d gradients: %w", b.Index, h.Format, n, err)
			}
			for i, w := range wire {
				grad[i] = dec(w)
			}
			return nil
		}}
	}
	all := scratch16(&h.gather, b.Index, world*n)
	w := pg.AllGather(ctx, wrap(all), wrap(wire))
	return &workReduction{work: w, finish: func() error {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("ddp: bucket %d: %v all-gather of %d gradients: %w", b.Index, h.Format, n, err)
		}
		for i, w := range all[:n] {
			grad[i] = dec(w)
		}
		for r := 1; r < world; r++ {
			for i, w := range all[r*n : (r+1)*n] {
				grad[i] += dec(w)
			}
		}
		return nil
	}}
}

// scratch16 returns a reusable n-element buffer for bucket index.
func scratch16(m *map[int][]uint16, index, n int) []uint16 {
	if *m == nil {
		*m = map[int][]uint16{}
	}
	s := (*m)[index]
	if cap(s) < n {
		s = make([]uint16, n)
		(*m)[index] = s
	}
	return s[:n]
}
