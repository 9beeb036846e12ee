package tensor

import (
	"github.com/cohortml/cohort/tensor/tensortest"
	"slices"
	"testing"
)

func arange(shape ...int) *Tensor {
	t := New(shape...)
	for i := range t.Data() {
		t.Data()[i] = float32(i)
	}
	return t
}

func TestViews(t *testing.T) {
	base := arange(2, 3, 4)
	tests := []struct {
		name  string
		view  *Tensor
		shape []int
		want  func(idx []int) float32 // element in terms of base
	}{
		{"reshape", base.Reshape(6, -1), []int{6, 4}, func(i []int) float32 { return float32(i[0]*4 + i[1]) }},
		{"transpose", base.Transpose(0, 2), []int{4, 3, 2}, func(i []int) float32 { return base.At(i[2], i[1], i[0]) }},
		{"permute", base.Permute(1, 2, 0), []int{3, 4, 2}, func(i []int) float32 { return base.At(i[2], i[0], i[1]) }},
		{"narrow", base.Narrow(2, 1, 2), []int{2, 3, 2}, func(i []int) float32 { return base.At(i[0], i[1], i[2]+1) }},
		{"slice", base.Slice(1, 1, 3), []int{2, 2, 4}, func(i []int) float32 { return base.At(i[0], i[1]+1, i[2]) }},
		{"select", base.Select(1, 2), []int{2, 4}, func(i []int) float32 { return base.At(i[0], 2, i[1]) }},
		{"unsqueeze", base.Unsqueeze(1), []int{2, 1, 3, 4}, func(i []int) float32 { return base.At(i[0], i[2], i[3]) }},
		{"unsqueeze_end", base.Unsqueeze(-1), []int{2, 3, 4, 1}, func(i []int) float32 { return base.At(i[0], i[1], i[2]) }},
		{"squeeze", base.Unsqueeze(0).Squeeze(0), []int{2, 3, 4}, func(i []int) float32 { return base.At(i...) }},
		{"expand", base.Select(0, 1).Select(0, 0).Expand(3, 4), []int{3, 4}, func(i []int) float32 { return base.At(1, 0, i[1]) }},
		{"reshape_of_transpose", base.Transpose(1, 2).Reshape(2, 12), []int{2, 12}, func(i []int) float32 { return base.At(i[0], i[1]%3, i[1]/3) }},
		{"T", base.Select(0, 0).T(), []int{4, 3}, func(i []int) float32 { return base.At(0, i[1], i[0]) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !slices.Equal(tc.view.Shape(), tc.shape) {
				t.Fatalf("shape %v, want %v", tc.view.Shape(), tc.shape)
			}
			tensortest.ForEachIndex(tc.shape, func(idx []int) {
				if got, want := tc.view.At(idx...), tc.want(idx); got != want {
					t.Fatalf("at %v: %g, want %g", idx, got, want)
				}
			})
			// Contiguous copies must read the same values in row-major order.
			assertClose(t, "contiguous", tc.view.Contiguous().Data(), naiveValues(tc.view), 0)
		})
	}
}

func TestViewsShareStorage(t *testing.T) {
	base := arange(3, 4)
	v := base.T().Narrow(0, 1, 2)
	v.Set(-1, 1, 2) // base[2][2]
	if base.At(2, 2) != -1 {
		t.Fatalf("write through a view not visible: base[2][2] = %g", base.At(2, 2))
	}
	v.Fill(7)
	for _, idx := range [][]int{{0, 1}, {0, 2}, {2, 1}} {
		if base.At(idx...) != 7 {
			t.Errorf("Fill through view: base%v = %g, want 7", idx, base.At(idx...))
		}
	}
	if base.At(0, 0) != 0 || base.At(0, 3) != 3 {
		t.Errorf("Fill leaked outside the view: %v", base)
	}
	r := base.Reshape(12)
	r.Data()[0] = 42
	if base.At(0, 0) != 42 {
		t.Errorf("Reshape of a contiguous tensor copied")
	}
	c := base.T().Reshape(12)
	c.Data()[0] = 99
	if base.At(0, 0) == 99 {
		t.Errorf("Reshape of a transposed view must copy")
	}
}

func TestCopyFromBroadcastAndClone(t *testing.T) {
	dst := New(2, 3)
	dst.CopyFrom(FromSlice([]float32{1, 2, 3}, 3))
	assertClose(t, "broadcast copy", dst.Data(), []float32{1, 2, 3, 1, 2, 3}, 0)
	c := dst.Clone()
	c.Data()[0] = 9
	if dst.At(0, 0) != 1 {
		t.Errorf("Clone shares storage")
	}
	tr := New(3, 2)
	tr.T().CopyFrom(dst) // write through a transposed destination
	assertClose(t, "transposed destination", tr.Data(), []float32{1, 1, 2, 2, 3, 3}, 0)
}

func TestViewPanics(t *testing.T) {
	a := New(2, 3)
	tests := []struct {
		name string
		f    func()
		want []string
	}{
		{"reshape_count", func() { a.Reshape(4, 2) }, []string{"tensor: Reshape", "[4 2]", "[2 3]"}},
		{"reshape_two_infer", func() { a.Reshape(-1, -1) }, []string{"Reshape", "-1"}},
		{"transpose_dim", func() { a.Transpose(0, 2) }, []string{"tensor: Transpose", "[2 3]"}},
		{"permute_repeat", func() { a.Permute(0, 0) }, []string{"Permute", "repeat"}},
		{"narrow_range", func() { a.Narrow(1, 2, 2) }, []string{"Narrow", "[2 3]"}},
		{"squeeze_not_one", func() { a.Squeeze(0) }, []string{"Squeeze", "[2 3]"}},
		{"expand_bad", func() { a.Expand(3, 3) }, []string{"Expand", "[2 3]", "[3 3]"}},
		{"at_range", func() { a.At(2, 0) }, []string{"At", "[2 0]", "[2 3]"}},
		{"item", func() { a.Item() }, []string{"Item", "[2 3]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { mustPanic(t, tc.f, tc.want...) })
	}
}
