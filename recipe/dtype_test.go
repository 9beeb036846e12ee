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
