package reducer

import (
	"fmt"
	"strings"
)

// Default bucket caps, as in PyTorch: a small first bucket so that the
// first reduction starts early in backward, larger ones after it.
const (
	DefaultFirstBucketCapBytes int64 = 1 << 20
	DefaultBucketCapBytes      int64 = 25 << 20
)

// gradElemBytes is the size of one gradient element (float32).
const gradElemBytes = 4

// gradAlign is the alignment, in elements, of every parameter's slot in
// the flat gradient buffer: 16 float32s, one 64-byte cache line, so that
// the matrix kernels writing gradients into bucket views store whole
// lines. Misaligned views cost several percent of a backward pass.
const gradAlign = 16

func alignUp(n int) int { return (n + gradAlign - 1) / gradAlign * gradAlign }

// Plan assigns parameters to gradient buckets and lays the buckets out in
// one flat gradient buffer.
//
// Invariants: Buckets are in launch order; the parameters of bucket i
// occupy elements [Buckets[i].Start, Buckets[i].End) of the flat buffer in
// the bucket's order, each starting at a multiple of 16 elements (64
// bytes) with zero padding after it up to the next multiple;
// Buckets[i].End == Buckets[i+1].Start; Offset[p] is parameter p's first
// element, or -1 for a parameter in no bucket.
type Plan struct {
	Buckets []BucketPlan
	Offset  []int
}

// BucketPlan is one bucket of a Plan.
type BucketPlan struct {
	Params     []int // parameter indices in expected ready order
	Start, End int   // element range in the flat buffer, padding included
	CapBytes   int64 // the cap this bucket was filled against
	ParamBytes int64 // the parameters' gradient bytes, padding excluded
}

// Bytes returns the bucket's size in the flat buffer, padding included.
func (b BucketPlan) Bytes() int64 { return int64(b.End-b.Start) * gradElemBytes }

// Len returns the total number of elements in all buckets.
func (p Plan) Len() int {
	if len(p.Buckets) == 0 {
		return 0
	}
	return p.Buckets[len(p.Buckets)-1].End
}

// String renders the plan one bucket per line, e.g.
// "bucket 0 cap=1048576 bytes=4239400 padded=4239424 params=[5 4 3 2]".
func (p Plan) String() string {
	var b strings.Builder
	for i, bk := range p.Buckets {
		fmt.Fprintf(&b, "bucket %d cap=%d bytes=%d padded=%d params=%v\n", i, bk.CapBytes, bk.ParamBytes, bk.Bytes(), bk.Params)
	}
	return b.String()
}

// PlanBuckets assigns the parameters listed in order to buckets. numel[i]
// is parameter i's element count (float32 gradients); order lists the
// parameter indices in the order their gradients are expected to become
// ready, each at most once (parameters not listed, e.g. frozen ones, get no
// bucket). Buckets are filled in that order; a bucket closes as soon as its
// parameters' gradient bytes reach its cap, firstCapBytes for the first
// bucket and capBytes for every later one, so a bucket exceeds its cap by
// at most its last parameter (the assignment PyTorch makes). In the flat
// buffer each parameter then starts on a 64-byte boundary. Zero-element
// parameters are placed like any other.
//
// PlanBuckets is a pure function; it returns an error for an index out of
// range, a repeated index, or a cap that is not positive.
func PlanBuckets(numel []int, order []int, firstCapBytes, capBytes int64) (Plan, error) {
	if firstCapBytes <= 0 || capBytes <= 0 {
		return Plan{}, fmt.Errorf("reducer: bucket caps must be positive (first %d bytes, others %d bytes)", firstCapBytes, capBytes)
	}
	p := Plan{Offset: make([]int, len(numel))}
	for i := range p.Offset {
		p.Offset[i] = -1
	}
	for _, idx := range order {
		if idx < 0 || idx >= len(numel) {
			return Plan{}, fmt.Errorf("reducer: bucket order names parameter %d of %d", idx, len(numel))
		}
		if numel[idx] < 0 {
			return Plan{}, fmt.Errorf("reducer: parameter %d has negative size %d", idx, numel[idx])
		}
		if p.Offset[idx] >= 0 {
			return Plan{}, fmt.Errorf("reducer: bucket order lists parameter %d twice", idx)
		}
		// Invariant: the last bucket is open when its size is below its cap.
		if n := len(p.Buckets); n == 0 || p.Buckets[n-1].ParamBytes >= p.Buckets[n-1].CapBytes {
			bcap := capBytes
			if n == 0 {
				bcap = firstCapBytes
			}
			start := 0
			if n > 0 {
				start = p.Buckets[n-1].End
			}
			p.Buckets = append(p.Buckets, BucketPlan{Start: start, End: start, CapBytes: bcap})
		}
		b := &p.Buckets[len(p.Buckets)-1]
		p.Offset[idx] = b.End
		b.Params = append(b.Params, idx)
		b.End = alignUp(b.End + numel[idx])
		b.ParamBytes += int64(numel[idx]) * gradElemBytes
	}
	return p, nil
}
