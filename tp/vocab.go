package tp

import (
	"context"
	"fmt"
	"math"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// VocabEmbedding is an embedding table [V, D] with its rows (the
// vocabulary) split across the ranks: Weight holds rows
// [Start, Start+V/n). A lookup takes the rows this rank holds, zeros for
// the others, and sums across the ranks (Reduce), so the output is
// replicated; each rank's gradient lands in its own rows only.
// Parameter: "weight", sharded on dimension 0.
type VocabEmbedding struct {
	Weight *autograd.Var
	Start  int // first vocabulary id this rank holds
	comm   *Comm
}

// NewVocabEmbedding shards the full table [V, D] across c's ranks; V must
// split evenly.
func NewVocabEmbedding(c *Comm, full *tensor.Tensor) (*VocabEmbedding, error) {
	if full.Dims() != 2 {
		return nil, fmt.Errorf("tp: vocab embedding: table shape %v, want [V, D]", full.Shape())
	}
	if V := full.Dim(0); V%c.Size() != 0 {
		return nil, fmt.Errorf("tp: vocab embedding: vocabulary %d does not split across %d tensor-parallel ranks", V, c.Size())
	}
	w := ShardedOn(0, 1).Shard(full, c.Rank(), c.Size())
	return &VocabEmbedding{Weight: autograd.NewVar(w, true), Start: c.Rank() * w.Dim(0), comm: c}, nil
}

// Lookup returns the rows idx shaped shape + [D] (shape defaults to
// [len(idx)]), replicated. An id outside [0, V) panics.
func (e *VocabEmbedding) Lookup(ctx context.Context, idx []int64, shape ...int) *autograd.Var {
	// The masked rows are read by nothing but the all-reduce, which sums
	// them in place.
	return reduceOwned(ctx, e.comm, maskedEmbedding(e.Weight, idx, e.Start, e.comm.Size(), shape))
}

func (e *VocabEmbedding) Shards() []Shard {
	return []Shard{{"weight", e.Weight, ShardedOn(0, 1)}}
}
func (e *VocabEmbedding) NamedParameters() []nn.NamedParameter { return namedParameters(e.Shards()) }
func (e *VocabEmbedding) NamedBuffers() []nn.NamedBuffer       { return nil }
func (e *VocabEmbedding) SetTraining(bool)                     {}

// maskedEmbedding looks up the ids in [start, start+Vl) in the local table
// w [Vl, D] and returns zero rows for the others.
func maskedEmbedding(w *autograd.Var, idx []int64, start, n int, shape []int) *autograd.Var {
	Vl, D := w.Value.Dim(0), w.Value.Dim(1)
	if len(shape) == 0 {
		shape = []int{len(idx)}
	}
	count := 1
	for _, d := range shape {
		count *= d
	}
	if count != len(idx) {
		panic(fmt.Sprintf("tp: VocabEmbedding: %d ids for shape %v", len(idx), shape))
	}
	var pos []int
	var local []int64
	for i, id := range idx {
		if id < 0 || id >= int64(Vl*n) {
			panic(fmt.Sprintf("tp: VocabEmbedding: id %d at position %d out of range for vocabulary %d", id, i, Vl*n))
		}
		if l := id - int64(start); l >= 0 && l < int64(Vl) {
			pos = append(pos, i)
			local = append(local, l)
		}
	}
	// Every row is written: this rank's rows of the table, zeros for the
	// others.
	y := tensor.Empty(len(idx), D)
	yd, wd := y.Data(), w.Value.Contiguous().Data()
	next := 0
	for j, i := range pos {
		clear(yd[next*D : i*D])
		copy(yd[i*D:(i+1)*D], wd[int(local[j])*D:])
		next = i + 1
	}
	clear(yd[next*D:])
	outShape := append(append([]int(nil), shape...), D)
	return autograd.RecordOwned("tp.VocabEmbedding", y.Reshape(outShape...), false, []*autograd.Var{w}, func(g *tensor.Tensor, _ bool) []autograd.InputGrad {
		gd := g.Contiguous().Data()
		dw := tensor.New(Vl, D)
		dd := dw.Data()
		for j, i := range pos {
			row := dd[int(local[j])*D:][:D]
			for k, v := range gd[i*D : (i+1)*D] {
				row[k] += v
			}
		}
		return []autograd.InputGrad{{T: dw, Owned: true}}
	})
}

// CrossEntropy returns the mean cross-entropy of vocabulary-parallel
// logits [N, V/n] (this rank's columns [Rank()·V/n, (Rank()+1)·V/n) of the
// full [N, V] logits) against the N targets (ids in [0, V)), replicated on
// every rank: Megatron's vocab-parallel cross-entropy. The full logits are
// never formed: the row maxima are all-reduced (max), then the sums of
// exponentials and the target logits (sum, in float64). The gradient,
// softmax − onehot restricted to this rank's columns, needs no
// communication. Values and gradients equal autograd.CrossEntropy's on the
// full logits up to rounding. A target out of range panics.
func CrossEntropy(ctx context.Context, c *Comm, logits *autograd.Var, target []int64) *autograd.Var {
	lv := logits.Value
	if lv.Dims() != 2 || lv.Dim(0) != len(target) {
		panic(fmt.Sprintf("tp: CrossEntropy: logits shape %v with %d targets (want [N, V/n] and N targets)", lv.Shape(), len(target)))
	}
	N, Vl := lv.Dim(0), lv.Dim(1)
	V, start := Vl*c.Size(), Vl*c.Rank()
	x := lv.Contiguous().Data()

	// Row maxima, all-reduced.
	m := tensor.Empty(N) // written whole
	md := m.Data()
	for i := range N {
		mx := float32(math.Inf(-1))
		for _, v := range x[i*Vl : (i+1)*Vl] {
			mx = max(mx, v)
		}
		md[i] = mx
	}
	if c.Size() > 1 {
		c.run("CrossEntropy max all-reduce", func() distributed.Work { return c.pg.AllReduce(ctx, distributed.FromTensor(m), distributed.Max) })
	}

	// Sums of exp(x − max) and the target logits, all-reduced together.
	prob := tensor.Empty(N, Vl) // written whole; the gradient is written over it
	pd := prob.Data()
	sums := make([]float64, 2*N)
	for i := range N {
		t := target[i]
		if t < 0 || t >= int64(V) {
			panic(fmt.Sprintf("tp: CrossEntropy: target %d at position %d out of range for %d classes", t, i, V))
		}
		mi := float64(md[i])
		var z float64
		for j, v := range x[i*Vl : (i+1)*Vl] {
			e := math.Exp(float64(v) - mi)
			pd[i*Vl+j] = float32(e)
			z += e
		}
		sums[i] = z
		if l := t - int64(start); l >= 0 && l < int64(Vl) {
			sums[N+i] = float64(x[i*Vl+int(l)])
		}
	}
	if c.Size() > 1 {
		c.run("CrossEntropy sum all-reduce", func() distributed.Work { return c.pg.AllReduce(ctx, distributed.F64(sums), distributed.Sum) })
	}
	var total float64
	for i := range N {
		z := sums[i]
		total += float64(md[i]) + math.Log(z) - sums[N+i]
		inv := 1 / z
		for j := range Vl {
			pd[i*Vl+j] = float32(float64(pd[i*Vl+j]) * inv)
		}
	}
	tensor.Recycle(m)
	y := tensor.Scalar(float32(total / float64(N)))
	tgt := append([]int64(nil), target...)
	return autograd.RecordOwned("tp.CrossEntropy", y, false, []*autograd.Var{logits}, func(g *tensor.Tensor, _ bool) []autograd.InputGrad {
		gi := float64(g.Item()) / float64(N)
		// The probabilities are read by this alone, which runs once (a
		// graph is differentiated once): the gradient is written over
		// them, each element after its read.
		dx := prob
		dd := dx.Data()
		for i := range N {
			l := tgt[i] - int64(start)
			for j := range Vl {
				q := 0.0
				if int64(j) == l {
					q = 1
				}
				dd[i*Vl+j] = float32(gi * (float64(pd[i*Vl+j]) - q))
			}
		}
		return []autograd.InputGrad{{T: dx, Owned: true}}
	})
}
