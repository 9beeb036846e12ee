package datasets

import (
	"fmt"
	"os"

	"github.com/cohortml/cohort/data"
)

// Text serves byte-level language-model windows over a byte string: sample
// i is the window starting at i·Stride, with X the Context bytes there (as
// float32 token ids 0..255, shape [Context]) and Labels the Context bytes
// one position later (the next-byte targets).
//
// Text keeps the bytes as float32 and int64 copies so that samples are
// views (no allocation per sample): 12 bytes of memory per text byte.
// It is immutable and safe for concurrent use.
type Text struct {
	Bytes   []byte
	Context int
	Stride  int

	x     []float32
	y     []int64
	shape []int
}

var _ data.Dataset = (*Text)(nil)

// NewText returns the windows of context bytes over text, starting every
// stride bytes (stride 0 means context: non-overlapping windows; stride 1
// gives every start). It fails for context < 1, stride < 0, or a text
// shorter than context+1 bytes.
func NewText(text []byte, context, stride int) (*Text, error) {
	if context < 1 {
		return nil, fmt.Errorf("datasets: text: context length %d, want ≥ 1", context)
	}
	if stride < 0 {
		return nil, fmt.Errorf("datasets: text: stride %d, want ≥ 0", stride)
	}
	if stride == 0 {
		stride = context
	}
	if len(text) < context+1 {
		return nil, fmt.Errorf("datasets: text: %d bytes is too short for one window of context %d (needs %d)", len(text), context, context+1)
	}
	t := &Text{Bytes: text, Context: context, Stride: stride, x: make([]float32, len(text)), y: make([]int64, len(text)), shape: []int{context}}
	for i, b := range text {
		t.x[i], t.y[i] = float32(b), int64(b)
	}
	return t, nil
}

// LoadText reads the file at path and returns NewText over its bytes.
func LoadText(path string, context, stride int) (*Text, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: text: %w", err)
	}
	t, err := NewText(b, context, stride)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

// Len returns the number of windows: ⌊(len−Context−1)/Stride⌋ + 1.
func (t *Text) Len() int { return (len(t.Bytes)-t.Context-1)/t.Stride + 1 }

// Get returns window i.
func (t *Text) Get(i int) (data.Sample, error) {
	if err := data.ErrIndex(i, t.Len()); err != nil {
		return data.Sample{}, fmt.Errorf("datasets: text: %w", err)
	}
	return t.Window(i * t.Stride)
}

// Window returns the window starting at any byte start in
// [0, len−Context−1]: X = bytes[start:start+Context], Labels =
// bytes[start+1:start+Context+1]. Models that draw random starts (as
// nanoGPT does) use it directly.
func (t *Text) Window(start int) (data.Sample, error) {
	if start < 0 || start+t.Context+1 > len(t.Bytes) {
		return data.Sample{}, fmt.Errorf("datasets: text: window start %d outside [0, %d]", start, len(t.Bytes)-t.Context-1)
	}
	c := t.Context
	return data.Sample{X: t.x[start : start+c : start+c], Shape: t.shape, Labels: t.y[start+1 : start+1+c : start+1+c]}, nil
}
