package recipe

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

func TestParseDType(t *testing.T) {
	for in, want := range map[string]tensor.DType{"": tensor.Float32, "fp32": tensor.Float32, "float32": tensor.Float32, "bf16": tensor.BFloat16, "BFloat16": tensor.BFloat16} {
		if got, err := ParseDType(in); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	if _, err := ParseDType("fp16"); err == nil || !strings.Contains(err.Error(), `"fp16"`) {
		t.Errorf("ParseDType(fp16): error %v, want one naming it", err)
	}
	if DTypeName(tensor.BFloat16) != "bf16" || DTypeName(tensor.Float32) != "fp32" {
		t.Errorf("DTypeName: %q, %q", DTypeName(tensor.BFloat16), DTypeName(tensor.Float32))
	}
}

// TestAutocast: every parameter's products in bf16 until restore, and
// the fallback note only for a widening kernel, naming it.
func TestAutocast(t *testing.T) {
	c, err := NewClassifier("cnn", rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	restore, _, err := Autocast(c.Model, tensor.BFloat16)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.Parameters(c.Model) {
		if p.AutocastDType() != tensor.BFloat16 {
			t.Fatalf("a parameter's products in %v under Autocast, want bfloat16", p.AutocastDType())
		}
	}
	restore()
	for _, p := range nn.Parameters(c.Model) {
		if p.AutocastDType() != tensor.Float32 {
			t.Fatalf("a parameter's products in %v after restore, want float32", p.AutocastDType())
		}
	}
	if n := fallbackNote("avx512bf16"); n != "" {
		t.Errorf("note %q for the native kernel, want none", n)
	}
	if n := fallbackNote("widen/avx512"); !strings.Contains(n, "widen/avx512") || strings.Contains(n, "\n") {
		t.Errorf("note %q for the widening path, want one line naming it", n)
	}
}

// TestUseDType: a bad flag value is named; the model's products follow a
// good one; only rank 0 writes the fallback note.
func TestUseDType(t *testing.T) {
	c, err := NewClassifier("mlp", rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	var notes strings.Builder
	if err := UseDType(c.Model, "fp16", 0, &notes); err == nil || !strings.HasPrefix(err.Error(), "-dtype: ") || !strings.Contains(err.Error(), `"fp16"`) {
		t.Errorf("UseDType(fp16): %v, want an error naming -dtype and the value", err)
	}
	t.Setenv("COHORT_GEMM_KERNEL", "avx512")
	if err := UseDType(c.Model, "bf16", 1, &notes); err != nil || notes.Len() != 0 {
		t.Errorf("UseDType(bf16) on rank 1: %v, notes %q: want no error and no note", err, notes.String())
	}
	if err := UseDType(c.Model, "bf16", 0, &notes); err != nil {
		t.Fatal(err)
	}
	if info, err := tensor.GEMM(); err == nil && strings.HasPrefix(info.BF16Kernel, "widen/") && !strings.Contains(notes.String(), info.BF16Kernel) {
		t.Errorf("rank 0 on %s: notes %q, want the fallback named", info.BF16Kernel, notes.String())
	}
	for _, p := range nn.Parameters(c.Model) {
		if p.AutocastDType() != tensor.BFloat16 {
			t.Fatalf("a parameter's autocast dtype is %v after UseDType(bf16)", p.AutocastDType())
		}
	}
}
