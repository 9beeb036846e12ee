package tensor

import (
	"strings"
	"testing"
)

func TestParseDevice(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Device
		str  string
	}{
		{"cpu", CPU, "cpu"}, {"cuda", CUDA(0), "cuda:0"}, {"cuda:0", CUDA(0), "cuda:0"},
		{"cuda:1", CUDA(1), "cuda:1"}, {"fake:3", NewDevice("fake", 3), "fake:3"},
	} {
		d, err := ParseDevice(c.in)
		if err != nil || d != c.want || d.String() != c.str {
			t.Errorf("ParseDevice(%q) = %v, %v; want %v (%s)", c.in, d, err, c.want, c.str)
		}
		if back, err := ParseDevice(d.String()); err != nil || back != d {
			t.Errorf("ParseDevice(%q) does not read back %v", d.String(), d)
		}
	}
	for _, bad := range []string{"", "gpu:", "cuda:-1", "cuda:x", "cuda:01", "CUDA", "cpu:1", ":0", "cuda:1:2"} {
		if d, err := ParseDevice(bad); err == nil {
			t.Errorf("ParseDevice(%q) = %v, want an error", bad, d)
		} else if !strings.HasPrefix(err.Error(), "tensor: device") {
			t.Errorf("ParseDevice(%q): error %q lacks the prefix", bad, err)
		}
	}
	if !CPU.IsCPU() || CUDA(0).IsCPU() || CUDA(2).Kind() != "cuda" || CUDA(2).Index() != 2 || CPU.Kind() != "cpu" {
		t.Errorf("Device accessors disagree")
	}
	if NewDevice("cpu", 0) != CPU {
		t.Errorf(`NewDevice("cpu", 0) is not CPU`)
	}
	if Float32.Size() != 4 || BFloat16.Size() != 2 || BFloat16.String() != "bfloat16" {
		t.Errorf("DType sizes or names wrong")
	}
}

func TestHostTensorsAreOnTheCPU(t *testing.T) {
	x := New(2, 3)
	if x.Device() != CPU || x.DType() != Float32 || x.Buffer() != nil {
		t.Errorf("New: device %v dtype %v", x.Device(), x.DType())
	}
	if x.To(CPU) != x {
		t.Errorf("To(CPU) of a host tensor is not a no-op")
	}
	if v := x.T(); v.Device() != CPU {
		t.Errorf("a view of a host tensor is on %v", v.Device())
	}
}

func TestNoBackend(t *testing.T) {
	mustPanic(t, func() { NewOn(NewDevice("nosuchkind", 0), 2) }, "tensor: NewOn: no backend for device nosuchkind:0")
	mustPanic(t, func() { New(2).To(CUDA(0)) }, "no backend for device cuda:0")
	mustPanic(t, func() { Register("cpu", nil) }, "tensor: Register")
}

func TestFromStorageBounds(t *testing.T) {
	s := make([]float32, 6)
	v := FromStorage(s, 1, []int{2, 2}, []int{1, 2})
	v.Set(5, 1, 1)
	if s[4] != 5 {
		t.Errorf("FromStorage view does not alias its storage")
	}
	mustPanic(t, func() { FromStorage(s, 2, []int{2, 3}, []int{3, 1}) }, "tensor: FromStorage: view")
	mustPanic(t, func() { FromStorage(s, 0, []int{2}, []int{1, 1}) }, "tensor: FromStorage")
	FromStorage(s, 6, []int{0, 3}, []int{3, 1}) // empty: reaches nothing
}
