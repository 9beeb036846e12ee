package data

import (
	"fmt"
	"math"
	"slices"

	"github.com/cohortml/cohort/tensor"
)

// Batch is a collated batch of samples.
//
// A Batch handed out by a Loader is valid until the loop body that received
// it returns: the Loader then reuses its memory for a later batch. Clone
// keeps a copy.
type Batch struct {
	// X holds the samples' features stacked along a new first dimension:
	// [B, shape...]; with Pad, [B, longest, rest...].
	X *tensor.Tensor
	// Labels holds the samples' integer labels row-major, LabelsPerSample
	// each; empty when the samples carry none.
	Labels []int64
	// Y is Labels as a float32 tensor: [B] when every sample has one label,
	// else [B, LabelsPerSample]; nil when the samples carry no labels.
	Y *tensor.Tensor
	// LabelsPerSample is the number of labels of each row of Labels.
	LabelsPerSample int
	// Target stacks the samples' real-valued targets, [B, len]; nil when
	// the samples carry none.
	Target *tensor.Tensor
	// Lengths and Mask are set by Pad: each sample's length along its first
	// dimension, and a [B, longest] mask holding 1 at real positions and 0
	// at padding.
	Lengths []int
	Mask    *tensor.Tensor
	// Indices holds the dataset index of each row.
	Indices []int
	// Epoch and Step locate the batch: Step counts batches from 0 within
	// the epoch's plan.
	Epoch, Step int

	samples                []Sample // scratch for the collate
	xbuf, ybuf, tbuf, mbuf []float32
	shape, yshape, tshape  []int
}

// Size returns the number of samples in the batch.
func (b *Batch) Size() int { return len(b.Indices) }

// Clone returns a deep copy of b that does not share memory with it.
func (b *Batch) Clone() *Batch {
	c := &Batch{
		Labels: slices.Clone(b.Labels), LabelsPerSample: b.LabelsPerSample,
		Lengths: slices.Clone(b.Lengths), Indices: slices.Clone(b.Indices),
		Epoch: b.Epoch, Step: b.Step,
	}
	c.X, c.Y, c.Target, c.Mask = cloneTensor(b.X), cloneTensor(b.Y), cloneTensor(b.Target), cloneTensor(b.Mask)
	return c
}

func cloneTensor(t *tensor.Tensor) *tensor.Tensor {
	if t == nil {
		return nil
	}
	c := t.Contiguous()
	return tensor.FromSlice(slices.Clone(c.Data()), t.Shape()...)
}

// Collate turns the samples of one batch into dst. dst holds the batch
// previously collated into it (or is empty): implementations should reuse
// its memory — Stack and Pad allocate nothing once the buffers have grown
// to the largest batch. Collate must be safe for concurrent use on
// different dst values.
//
// indices[j] is the dataset index of samples[j]; errors name it.
type Collate interface {
	Collate(dst *Batch, samples []Sample, indices []int) error
}

// Stack is the default Collate: every sample of a batch must have the same
// shape, the same number of labels and the same number of targets.
type Stack struct{}

// Pad is a Collate for variable-length samples: X of shape [len, rest...]
// is padded along its first dimension to the batch's longest sample with
// Value (rest must agree). With SequenceLabels every sample carries one
// label per position (len labels), padded with LabelValue (use the loss's
// ignore index, e.g. -100); otherwise every sample must have the same
// number of labels, which are stacked. Batch.Lengths and Batch.Mask record
// the real lengths.
type Pad struct {
	Value          float32
	LabelValue     int64
	SequenceLabels bool
}

// CollateError reports a sample that does not fit its batch.
type CollateError struct {
	Index  int    // dataset index of the sample
	Row    int    // its row in the batch
	Reason string // what was wrong
}

func (e *CollateError) Error() string {
	return fmt.Sprintf("data: collate: sample %d (row %d of the batch): %s", e.Index, e.Row, e.Reason)
}

func sampleElems(s Sample) (int, []int, error) {
	shape := s.XShape()
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, shape, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d > 0 && n > math.MaxInt/d {
			return 0, shape, fmt.Errorf("shape %v overflows", shape)
		}
		n *= d
	}
	if n != len(s.X) {
		return 0, shape, fmt.Errorf("shape %v needs %d values, X has %d", shape, n, len(s.X))
	}
	return n, shape, nil
}

// Collate implements Collate.
func (Stack) Collate(dst *Batch, samples []Sample, indices []int) error {
	if len(samples) == 0 {
		return fmt.Errorf("data: collate: empty batch")
	}
	n, shape, err := sampleElems(samples[0])
	if err != nil {
		return &CollateError{Index: indices[0], Row: 0, Reason: err.Error()}
	}
	nl, nt := len(samples[0].Labels), len(samples[0].Target)
	for j, s := range samples[1:] {
		j++
		_, sh, err := sampleElems(s)
		if err != nil {
			return &CollateError{Index: indices[j], Row: j, Reason: err.Error()}
		}
		if !slices.Equal(sh, shape) {
			return &CollateError{Index: indices[j], Row: j, Reason: fmt.Sprintf("shape %v differs from its batch-mates' %v (sample %d); use Pad for variable lengths", sh, shape, indices[0])}
		}
		if len(s.Labels) != nl || len(s.Target) != nt {
			return &CollateError{Index: indices[j], Row: j, Reason: fmt.Sprintf("%d labels and %d targets, batch-mates have %d and %d", len(s.Labels), len(s.Target), nl, nt)}
		}
	}
	B := len(samples)
	x := grow(&dst.xbuf, B*n)
	for j, s := range samples {
		copy(x[j*n:(j+1)*n], s.X)
	}
	dst.shape = append(append(dst.shape[:0], B), shape...)
	dst.X = view(dst.X, x, dst.shape)
	dst.Lengths, dst.Mask = dst.Lengths[:0], nil
	stackLabels(dst, samples, nl)
	stackTargets(dst, samples, nt)
	return nil
}

// Collate implements Collate.
func (p Pad) Collate(dst *Batch, samples []Sample, indices []int) error {
	if len(samples) == 0 {
		return fmt.Errorf("data: collate: empty batch")
	}
	_, shape0, err := sampleElems(samples[0])
	if err != nil {
		return &CollateError{Index: indices[0], Row: 0, Reason: err.Error()}
	}
	if len(shape0) == 0 {
		return &CollateError{Index: indices[0], Row: 0, Reason: "Pad needs samples with at least one dimension, got a scalar"}
	}
	rest := shape0[1:]
	inner := 1
	for _, d := range rest {
		inner *= d
	}
	longest := 0
	nl, nt := len(samples[0].Labels), len(samples[0].Target)
	for j, s := range samples {
		_, sh, err := sampleElems(s)
		if err != nil {
			return &CollateError{Index: indices[j], Row: j, Reason: err.Error()}
		}
		if len(sh) != len(shape0) || !slices.Equal(sh[1:], rest) {
			return &CollateError{Index: indices[j], Row: j, Reason: fmt.Sprintf("shape %v does not pad to its batch-mates' [*%v] (sample %d)", sh, rest, indices[0])}
		}
		if len(s.Target) != nt {
			return &CollateError{Index: indices[j], Row: j, Reason: fmt.Sprintf("%d targets, batch-mates have %d", len(s.Target), nt)}
		}
		longest = max(longest, sh[0])
		switch {
		case p.SequenceLabels && len(s.Labels) != sh[0]:
			return &CollateError{Index: indices[j], Row: j, Reason: fmt.Sprintf("%d labels for length %d; Pad.SequenceLabels wants one per position", len(s.Labels), sh[0])}
		case !p.SequenceLabels && len(s.Labels) != nl:
			return &CollateError{Index: indices[j], Row: j, Reason: fmt.Sprintf("%d labels, batch-mates have %d", len(s.Labels), nl)}
		}
	}
	B := len(samples)
	row := longest * inner
	x := grow(&dst.xbuf, B*row)
	m := grow(&dst.mbuf, B*longest)
	dst.Lengths = dst.Lengths[:0]
	for j, s := range samples {
		l := s.XShape()[0]
		copy(x[j*row:], s.X)
		fill(x[j*row+len(s.X):(j+1)*row], p.Value)
		fill(m[j*longest:j*longest+l], 1)
		fill(m[j*longest+l:(j+1)*longest], 0)
		dst.Lengths = append(dst.Lengths, l)
	}
	dst.shape = append(append(append(dst.shape[:0], B, longest), rest...), B, longest)
	dst.X = view(dst.X, x, dst.shape[:2+len(rest)])
	dst.Mask = view(dst.Mask, m, dst.shape[2+len(rest):])
	if p.SequenceLabels {
		dst.LabelsPerSample = longest
		dst.Labels = slices.Grow(dst.Labels[:0], B*longest)[:B*longest]
		for j, s := range samples {
			copy(dst.Labels[j*longest:], s.Labels)
			for k := j*longest + len(s.Labels); k < (j+1)*longest; k++ {
				dst.Labels[k] = p.LabelValue
			}
		}
		labelTensor(dst, B)
	} else {
		stackLabels(dst, samples, nl)
	}
	stackTargets(dst, samples, nt)
	return nil
}

func stackLabels(dst *Batch, samples []Sample, nl int) {
	B := len(samples)
	dst.LabelsPerSample = nl
	dst.Labels = slices.Grow(dst.Labels[:0], B*nl)[:B*nl]
	for j, s := range samples {
		copy(dst.Labels[j*nl:], s.Labels)
	}
	labelTensor(dst, B)
}

// labelTensor mirrors dst.Labels into dst.Y.
func labelTensor(dst *Batch, B int) {
	nl := dst.LabelsPerSample
	if nl == 0 {
		dst.Y = nil
		return
	}
	y := grow(&dst.ybuf, len(dst.Labels))
	for i, v := range dst.Labels {
		y[i] = float32(v)
	}
	dst.yshape = append(dst.yshape[:0], B)
	if nl > 1 {
		dst.yshape = append(dst.yshape, nl)
	}
	dst.Y = view(dst.Y, y, dst.yshape)
}

func stackTargets(dst *Batch, samples []Sample, nt int) {
	if nt == 0 {
		dst.Target = nil
		return
	}
	B := len(samples)
	t := grow(&dst.tbuf, B*nt)
	for j, s := range samples {
		copy(t[j*nt:], s.Target)
	}
	dst.tshape = append(dst.tshape[:0], B, nt)
	dst.Target = view(dst.Target, t, dst.tshape)
}

// grow returns (*buf)[:n], reallocating only when the capacity is short.
func grow(buf *[]float32, n int) []float32 {
	if cap(*buf) < n {
		*buf = make([]float32, n, n+n/4)
	}
	*buf = (*buf)[:n]
	return *buf
}

func fill(s []float32, v float32) {
	for i := range s {
		s[i] = v
	}
}

// view returns a tensor over data with shape, reusing old when it already
// is exactly that view (the steady state of a loader), so that collating
// allocates nothing.
func view(old *tensor.Tensor, data []float32, shape []int) *tensor.Tensor {
	if old != nil && slices.Equal(old.Shape(), shape) && old.Offset() == 0 {
		if st := old.Storage(); len(st) == len(data) && (len(st) == 0 || &st[0] == &data[0]) {
			return old
		}
	}
	return tensor.FromSlice(data, shape...)
}
