package data

import (
	"context"
	"fmt"
	"iter"
)

// Sample is one training example.
//
// X holds the input features row-major with shape Shape (a nil Shape means
// one dimension of len(X)). Labels holds integer targets: one class index
// for classification, or one target id per position for sequence models.
// Target holds real-valued targets for regression and is nil otherwise.
//
// The slices may alias the dataset's memory; a Sample is read-only for its
// receiver.
type Sample struct {
	X      []float32
	Shape  []int
	Labels []int64
	Target []float32
}

// XShape returns the shape of X, [len(X)] when Shape is nil. The result
// must not be modified.
func (s Sample) XShape() []int {
	if s.Shape == nil {
		return []int{len(s.X)}
	}
	return s.Shape
}

// Dataset is a finite, indexable collection of samples.
//
// Get must be safe for concurrent use: the Loader calls it from several
// worker goroutines at once. Get returns an error (never panics) for an
// index outside [0, Len()); ErrIndex helps build it.
type Dataset interface {
	Len() int
	Get(i int) (Sample, error)
}

// IterableDataset is a stream of samples of unknown length, read in order.
//
// Iter yields samples until the stream ends, the consumer stops, or ctx is
// cancelled; a yielded non-nil error ends the stream. Each call starts a
// new pass.
type IterableDataset interface {
	Iter(ctx context.Context) iter.Seq2[Sample, error]
}

// IndexError reports an index outside a dataset.
type IndexError struct {
	Index, Len int
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("data: index %d out of range [0, %d)", e.Index, e.Len)
}

// ErrIndex returns an *IndexError when i is outside [0, n), else nil.
func ErrIndex(i, n int) error {
	if i < 0 || i >= n {
		return &IndexError{Index: i, Len: n}
	}
	return nil
}
