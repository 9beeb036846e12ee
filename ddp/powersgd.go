package ddp

// PowerSGD gradient compression (Vogels, Karimireddy and Jaggi, "PowerSGD:
// Practical Low-Rank Gradient Compression for Distributed Optimization",
// NeurIPS 2019), following the structure of PyTorch's powerSGD_hook.
//
// Each parameter gradient with at least two dimensions is viewed as an
// n×m matrix M (n = first dimension). With a shared m×r matrix Q, one
// round of subspace iteration is
//
//	P = M·Q            all-reduced (summed) over ranks
//	P = orthonormalise(P)
//	Q = Mᵀ·P           all-reduced and divided by the number of ranks
//	M ≈ P·Qᵀ           the rank-r approximation of the average gradient
//
// sending (n+m)·r numbers instead of n·m. Error feedback adds the part of
// last step's gradient the approximation missed (M − P·Qᵀ, kept per rank)
// to this step's gradient before compressing; warm start reuses last
// step's Q instead of a fresh random one, so the iteration keeps refining
// the same subspace. Vectors (biases) and matrices too small to gain are
// all-reduced exactly.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/cohortml/cohort/distributed"
)

// PowerSGDOptions configures NewPowerSGD. The zero value is rank 1,
// compression from step 1, error feedback and warm start on.
type PowerSGDOptions struct {
	// Rank is the approximation rank r (default 1).
	Rank int
	// StartStep is the first synchronised step that is compressed; earlier
	// steps are reduced exactly. Values below 1 mean 1: step 0 runs before
	// the buckets are rebuilt in the observed order.
	StartStep int64
	// MinCompressionRate: a matrix is compressed only when
	// n·m > MinCompressionRate·(n+m)·r (default 2).
	MinCompressionRate float64
	// NoErrorFeedback drops the per-rank error memory.
	NoErrorFeedback bool
	// NoWarmStart draws a fresh random Q every step.
	NoWarmStart bool
	// Epsilon is added to column norms during orthonormalisation (0: a
	// zero column stays zero instead of becoming NaN).
	Epsilon float32
	// Seed makes the random initial Q; it must be equal on every rank.
	Seed uint64
}

// PowerSGD is a CommHook compressing gradients to rank-r factors. It keeps
// per-bucket state (Q, and the error memory of this rank), so one PowerSGD
// serves one Model.
type PowerSGD struct {
	o       PowerSGDOptions
	buckets map[int]*powerBucket
}

// NewPowerSGD returns a PowerSGD hook.
func NewPowerSGD(o PowerSGDOptions) (*PowerSGD, error) {
	if o.Rank < 0 {
		return nil, fmt.Errorf("ddp: NewPowerSGD: rank %d is negative", o.Rank)
	}
	if o.Rank == 0 {
		o.Rank = 1
	}
	if o.StartStep < 1 {
		o.StartStep = 1
	}
	if math.IsNaN(o.MinCompressionRate) || o.MinCompressionRate < 0 {
		return nil, fmt.Errorf("ddp: NewPowerSGD: MinCompressionRate %v must be ≥ 0", o.MinCompressionRate)
	}
	if o.MinCompressionRate == 0 {
		o.MinCompressionRate = 2
	}
	if o.Epsilon < 0 || math.IsNaN(float64(o.Epsilon)) {
		return nil, fmt.Errorf("ddp: NewPowerSGD: Epsilon %v must be ≥ 0", o.Epsilon)
	}
	return &PowerSGD{o: o, buckets: map[int]*powerBucket{}}, nil
}

// powerBucket is the state of one bucket.
//
// Invariant: mats and exact partition the bucket's parameters; p holds
// r·n values per matrix (Pᵀ, row-major), q holds r·m (Qᵀ).
type powerBucket struct {
	key   string // layout the state was built for
	mats  []powerMat
	exact []BucketParam
	p, q  []float32
	u     []float32 // exact parameters, packed
	err   []float32 // error memory, len(Grad); only matrix ranges are used
	haveQ bool
}

// powerMat is one compressed parameter: an n×m matrix at off in the
// bucket, with r factors at pOff in p and qOff in q.
type powerMat struct {
	off, n, m, r int
	pOff, qOff   int
}

func (h *PowerSGD) state(b *Bucket) *powerBucket {
	key := fmt.Sprint(len(b.Grad), b.Params)
	if st := h.buckets[b.Index]; st != nil && st.key == key {
		return st
	}
	st := &powerBucket{key: key}
	var np, nq, nu int
	for _, bp := range b.Params {
		n, m, r, ok := h.matrixShape(bp)
		if !ok {
			st.exact = append(st.exact, bp)
			nu += bp.Len
			continue
		}
		st.mats = append(st.mats, powerMat{off: bp.Offset, n: n, m: m, r: r, pOff: np, qOff: nq})
		np += r * n
		nq += r * m
	}
	st.p, st.q, st.u = make([]float32, np), make([]float32, nq), make([]float32, nu)
	if !h.o.NoErrorFeedback {
		st.err = make([]float32, len(b.Grad))
	}
	h.buckets[b.Index] = st
	return st
}

// matrixShape decides whether bp is compressed and with which n, m, r.
func (h *PowerSGD) matrixShape(bp BucketParam) (n, m, r int, ok bool) {
	if len(bp.Shape) < 2 || bp.Len == 0 {
		return 0, 0, 0, false
	}
	n = bp.Shape[0]
	m = bp.Len / n
	r = min(h.o.Rank, n, m)
	return n, m, r, float64(n)*float64(m) > h.o.MinCompressionRate*float64((n+m)*r)
}

// Start implements CommHook.
func (h *PowerSGD) Start(ctx context.Context, pg distributed.ProcessGroup, b *Bucket) Reduction {
	if b.Step < h.o.StartStep {
		return startAllReduce(ctx, pg, b.Index, b.Grad, b.Divisor)
	}
	st := h.state(b)
	g := b.Grad
	feedback := st.err != nil && !b.Shadow
	for _, mt := range st.mats {
		mat := g[mt.off : mt.off+mt.n*mt.m]
		if feedback {
			e := st.err[mt.off : mt.off+len(mat)]
			for i := range mat {
				mat[i] += e[i]
			}
			copy(e, mat) // e holds the input until Finish subtracts the approximation
		}
	}
	// Exact part first, then P: both run while backward continues.
	var exact distributed.Work
	if len(st.u) > 0 {
		k := 0
		for _, bp := range st.exact {
			k += copy(st.u[k:], g[bp.Offset:bp.Offset+bp.Len])
		}
		exact = pg.AllReduce(ctx, distributed.F32(st.u), distributed.Sum)
	}
	if !st.haveQ || h.o.NoWarmStart {
		rng := rand.New(rand.NewPCG(h.o.Seed, uint64(b.Step)<<16^uint64(b.Index)))
		for i := range st.q {
			st.q[i] = float32(rng.NormFloat64())
		}
	}
	for _, mt := range st.mats {
		qt := st.q[mt.qOff : mt.qOff+mt.r*mt.m]
		orthonormalizeRows(qt, mt.r, mt.m, h.o.Epsilon)
		powerP(st.p[mt.pOff:mt.pOff+mt.r*mt.n], g[mt.off:mt.off+mt.n*mt.m], qt, mt.n, mt.m, mt.r)
	}
	var pw distributed.Work
	if len(st.p) > 0 {
		pw = pg.AllReduce(ctx, distributed.F32(st.p), distributed.Sum)
	}
	r := &powerReduction{h: h, st: st, b: b, ctx: ctx, pg: pg, exact: exact, pw: pw}
	return r
}

type powerReduction struct {
	h         *PowerSGD
	st        *powerBucket
	b         *Bucket
	ctx       context.Context
	pg        distributed.ProcessGroup
	exact, pw distributed.Work
}

// Done reports the P all-reduce (issued last; ops complete in order).
func (r *powerReduction) Done() <-chan struct{} {
	switch {
	case r.pw != nil:
		return r.pw.Done()
	case r.exact != nil:
		return r.exact.Done()
	}
	return newDoneReduction().done
}

func (r *powerReduction) Finish() error {
	st, b, g := r.st, r.b, r.b.Grad
	if r.exact != nil {
		if err := r.exact.Wait(); err != nil {
			return fmt.Errorf("ddp: bucket %d: PowerSGD all-reduce of %d uncompressed gradients: %w", b.Index, len(st.u), err)
		}
		scale(st.u, b.Divisor)
		k := 0
		for _, bp := range st.exact {
			k += copy(g[bp.Offset:bp.Offset+bp.Len], st.u[k:])
		}
	}
	if r.pw == nil {
		return nil
	}
	if err := r.pw.Wait(); err != nil {
		return fmt.Errorf("ddp: bucket %d: PowerSGD all-reduce of P (%d values): %w", b.Index, len(st.p), err)
	}
	for _, mt := range st.mats {
		pt := st.p[mt.pOff : mt.pOff+mt.r*mt.n]
		orthonormalizeRows(pt, mt.r, mt.n, r.h.o.Epsilon)
		powerQ(st.q[mt.qOff:mt.qOff+mt.r*mt.m], g[mt.off:mt.off+mt.n*mt.m], pt, mt.n, mt.m, mt.r)
	}
	if err := r.pg.AllReduce(r.ctx, distributed.F32(st.q), distributed.Sum).Wait(); err != nil {
		return fmt.Errorf("ddp: bucket %d: PowerSGD all-reduce of Q (%d values): %w", b.Index, len(st.q), err)
	}
	scale(st.q, b.Divisor)
	for _, mt := range st.mats {
		mat := g[mt.off : mt.off+mt.n*mt.m]
		powerApprox(mat, st.p[mt.pOff:mt.pOff+mt.r*mt.n], st.q[mt.qOff:mt.qOff+mt.r*mt.m], mt.n, mt.m, mt.r)
		if st.err != nil && !b.Shadow {
			e := st.err[mt.off : mt.off+len(mat)]
			for i := range e {
				e[i] -= mat[i]
			}
		}
	}
	st.haveQ = !r.h.o.NoWarmStart
	return nil
}

// orthonormalizeRows makes the rows of a (rows×cols, row-major)
// orthonormal by modified Gram–Schmidt, in place. A row whose norm is zero
// (after removing the earlier rows' directions) stays zero when eps is 0;
// with eps > 0 every row is divided by its norm + eps, as in PyTorch.
func orthonormalizeRows(a []float32, rows, cols int, eps float32) {
	for i := 0; i < rows; i++ {
		row := a[i*cols : (i+1)*cols]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		norm := float32(math.Sqrt(ss)) + eps
		if norm != 0 {
			inv := 1 / norm
			for k := range row {
				row[k] *= inv
			}
		}
		for j := i + 1; j < rows; j++ {
			other := a[j*cols : (j+1)*cols]
			var dot float64
			for k, v := range row {
				dot += float64(v) * float64(other[k])
			}
			d := float32(dot)
			for k, v := range row {
				other[k] -= d * v
			}
		}
	}
}

// powerP computes Pᵀ = (M·Q)ᵀ: pt (r×n) from m (n×m) and qt (r×m).
func powerP(pt, m, qt []float32, n, cols, r int) {
	for k := 0; k < r; k++ {
		q := qt[k*cols : (k+1)*cols]
		for i := 0; i < n; i++ {
			row := m[i*cols : (i+1)*cols]
			var s float32
			for j, v := range row {
				s += v * q[j]
			}
			pt[k*n+i] = s
		}
	}
}

// powerQ computes Qᵀ = (Mᵀ·P)ᵀ: qt (r×m) from m (n×m) and pt (r×n).
func powerQ(qt, m, pt []float32, n, cols, r int) {
	clear(qt)
	for k := 0; k < r; k++ {
		q := qt[k*cols : (k+1)*cols]
		for i := 0; i < n; i++ {
			c := pt[k*n+i]
			if c == 0 {
				continue
			}
			row := m[i*cols : (i+1)*cols]
			for j, v := range row {
				q[j] += c * v
			}
		}
	}
}

// powerApprox writes M = P·Qᵀ into m (n×m) from pt (r×n) and qt (r×m).
func powerApprox(m, pt, qt []float32, n, cols, r int) {
	for i := 0; i < n; i++ {
		row := m[i*cols : (i+1)*cols]
		clear(row)
		for k := 0; k < r; k++ {
			c := pt[k*n+i]
			q := qt[k*cols : (k+1)*cols]
			for j := range row {
				row[j] += c * q[j]
			}
		}
	}
}
