package data

import (
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// TensorDataset serves the rows of a tensor (PyTorch's TensorDataset):
// sample i is X[i] with its labels and targets. Samples view the tensors'
// memory; nothing is copied.
//
// It is immutable and safe for concurrent use.
type TensorDataset struct {
	x, target     []float32
	shape         []int // shape of one sample
	n, xRow, tRow int
	labels        []int64
	labelsPer     int
}

var _ Dataset = (*TensorDataset)(nil)

// NewTensorDataset returns a dataset over the rows of x ([N, ...]).
// labels holds N·k integer labels (k per sample, row-major) or is nil;
// target, when not nil, is [N, ...] real-valued targets. x and target must
// be contiguous (call Contiguous first).
func NewTensorDataset(x *tensor.Tensor, labels []int64, target *tensor.Tensor) (*TensorDataset, error) {
	if x == nil || x.Dims() == 0 {
		return nil, fmt.Errorf("data: tensor dataset: X must have a leading sample dimension")
	}
	if !x.IsContiguous() {
		return nil, fmt.Errorf("data: tensor dataset: X (shape %v) is not contiguous", x.Shape())
	}
	n := x.Dim(0)
	d := &TensorDataset{x: x.Data(), shape: append([]int(nil), x.Shape()[1:]...), n: n, labels: labels}
	if n > 0 {
		d.xRow = len(d.x) / n
	}
	switch {
	case len(labels) == 0:
	case n == 0 || len(labels)%n != 0:
		return nil, fmt.Errorf("data: tensor dataset: %d labels for %d samples (want a multiple)", len(labels), n)
	default:
		d.labelsPer = len(labels) / n
	}
	if target != nil {
		if target.Dims() == 0 || target.Dim(0) != n {
			return nil, fmt.Errorf("data: tensor dataset: target shape %v, want [%d, ...] to match X %v", target.Shape(), n, x.Shape())
		}
		if !target.IsContiguous() {
			return nil, fmt.Errorf("data: tensor dataset: target (shape %v) is not contiguous", target.Shape())
		}
		d.target = target.Data()
		if n > 0 {
			d.tRow = len(d.target) / n
		}
	}
	return d, nil
}

// Len returns N.
func (d *TensorDataset) Len() int { return d.n }

// Get returns row i.
func (d *TensorDataset) Get(i int) (Sample, error) {
	if err := ErrIndex(i, d.n); err != nil {
		return Sample{}, fmt.Errorf("data: tensor dataset: %w", err)
	}
	s := Sample{X: d.x[i*d.xRow : (i+1)*d.xRow : (i+1)*d.xRow], Shape: d.shape}
	if d.labelsPer > 0 {
		s.Labels = d.labels[i*d.labelsPer : (i+1)*d.labelsPer : (i+1)*d.labelsPer]
	}
	if d.target != nil {
		s.Target = d.target[i*d.tRow : (i+1)*d.tRow : (i+1)*d.tRow]
	}
	return s, nil
}
