package cudatensor

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/cuda/cudatest"
	"github.com/cohortml/cohort/device/fakedev"
	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/device/nvrtc"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

func TestRegistered(t *testing.T) {
	b, ok := tensor.BackendOf(tensor.CUDA(0))
	if !ok {
		t.Fatal("no backend registered for cuda:0")
	}
	if _, ok := b.(backend); !ok {
		t.Fatalf("cuda's backend is %T, want this package's", b)
	}
	if _, ok := b.(optim.DeviceKernels); !ok {
		t.Fatal("cuda's backend has no optimizer kernels")
	}
}

// TestInitWithoutDevice runs the real driver: on a machine with libcuda
// but no GPU its cuInit says CUDA_ERROR_NO_DEVICE, and the first move of
// a tensor to cuda panics with that one line, naming the library found.
func TestInitWithoutDevice(t *testing.T) {
	err := Init(tensor.CUDA(0))
	switch {
	case err == nil:
		t.Skip("skipped: a CUDA device is present (the GPU tests cover it)")
	case errors.Is(err, cuda.ErrNoDevice):
		if !strings.Contains(err.Error(), "libcuda") || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
			t.Errorf("error %q does not name the driver library and cuInit's result", err)
		}
	case errors.Is(err, cuda.ErrNotFound):
		if !strings.Contains(err.Error(), "looked") && !strings.Contains(err.Error(), "COHORT_CUDA_LIB_DIR") {
			t.Errorf("error %q does not say where the driver was looked for", err)
		}
	default:
		t.Fatalf("Init: %v, want a missing driver or no device", err)
	}
	if strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "cudatensor: cuda:0: ") {
		t.Errorf("error is not one line prefixed with the package and device: %q", err)
	}
	if again := Init(tensor.CUDA(0)); again == nil || again.Error() != err.Error() {
		t.Errorf("second Init: %v, want the same error", again)
	}
	got := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		tensor.FromSlice([]float32{1, 2, 3}, 3).To(tensor.CUDA(0))
		return ""
	}()
	if got != err.Error() {
		t.Errorf("moving a tensor to cuda:0 panicked with %q, want %q", got, err)
	}
}

// methods lists an interface's method names.
func methods(v any) []string {
	typ := reflect.TypeOf(v).Elem()
	var out []string
	for i := range typ.NumMethod() {
		out = append(out, typ.Method(i).Name)
	}
	return out
}

// TestPathsComplete fails when a method of tensor.Backend or
// optim.DeviceKernels has no implementation path, when a path names a
// kernel the table does not have, or when a path lists neither kernels,
// cuBLAS nor the driver.
func TestPathsComplete(t *testing.T) {
	want := append(methods((*tensor.Backend)(nil)), methods((*optim.DeviceKernels)(nil))...)
	for _, m := range want {
		pa, ok := paths[m]
		if !ok {
			t.Errorf("%s has no CUDA implementation path in paths", m)
			continue
		}
		if len(pa.kernels)+len(pa.cublas)+len(pa.driver) == 0 {
			t.Errorf("%s: path with no kernel, cuBLAS or driver call", m)
		}
		for _, k := range pa.kernels {
			if _, ok := lookup(k); !ok {
				t.Errorf("%s: kernel %s is not in the kernel table", m, k)
			}
		}
	}
	for m := range paths {
		if !slices.Contains(want, m) {
			t.Errorf("paths lists %s, which neither interface has", m)
		}
	}
}

func TestPackChecksTheTable(t *testing.T) {
	k, _ := kernels.Lookup("add_f32")
	if _, err := pack(k, []arg{ptr(1), ptr(2), ptr(3), i64(4)}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]arg{
		{ptr(1), ptr(2), ptr(3)},
		{ptr(1), ptr(2), ptr(3), i32(4)},
		{ptr(1), f32(2), ptr(3), i64(4)},
		{ptr(1), ptr(2), ptr(3), i64(4), i64(5)},
	} {
		if _, err := pack(k, bad); err == nil {
			t.Errorf("pack(add_f32, %v) succeeded", bad)
		}
	}
	for _, k := range kernels.Table() {
		for _, p := range k.Params {
			if _, err := paramKind(p.Type); err != nil {
				t.Errorf("%s: %v", k.Name, err)
			}
		}
	}
}

// dry is a state that records instead of running.
func dry() *state {
	return &state{dev: tensor.CUDA(0), dry: &dryRun{next: 1 << 20}}
}

func (s *state) tensor(shape ...int) *tensor.Tensor { return s.scratch("test", shape...) }

// dryCase runs one Backend method with representative shapes.
type dryCase struct {
	name, method string
	run          func(s *state)
}

func dryCases() []dryCase {
	be := backend{}
	const B, T, H, hd, V = 2, 8, 2, 16, 11
	d := H * hd
	ce := tensor.CrossEntropyOptions{}
	ign := tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100}
	tg := []int64{1, 0, 3, -100}
	var cs []dryCase
	add := func(name, method string, run func(s *state)) { cs = append(cs, dryCase{name, method, run}) }
	add("alloc", "Alloc", func(s *state) { backend{dry: s}.Alloc(s.dev, tensor.Float32, 10) })
	add("release", "Release", func(s *state) { be.Release(buf(s.tensor(4))) })
	add("upload", "Upload", func(s *state) { be.Upload(buf(s.tensor(4)), 1, []float32{1, 2}) })
	add("download", "Download", func(s *state) { be.Download(make([]float32, 2), buf(s.tensor(4)), 1) })
	add("copy", "Copy", func(s *state) { be.Copy(s.tensor(3, 4), s.tensor(3, 4)) })
	add("copy-strided", "Copy", func(s *state) { be.Copy(s.tensor(3, 2), s.tensor(2, 3).Transpose(0, 1)) })
	add("copy-5d", "Copy", func(s *state) { be.Copy(s.tensor(2, 3, 2, 2, 2), s.tensor(2, 2, 2, 3, 2).Permute(0, 3, 1, 2, 4)) })
	add("fill", "Fill", func(s *state) { be.Fill(s.tensor(3, 4), 2) })
	for _, op := range []tensor.BinaryOp{tensor.BinaryCopy, tensor.BinaryAdd, tensor.BinarySub, tensor.BinaryMul, tensor.BinaryAxpy, tensor.BinaryDiv, tensor.BinaryMax, tensor.BinaryMin} {
		add(fmt.Sprintf("binary-%d", op), "Binary", func(s *state) { be.Binary(op, 0.5, s.tensor(3, 4), s.tensor(3, 4), s.tensor(3, 4)) })
	}
	add("binary-bias", "Binary", func(s *state) {
		be.Binary(tensor.BinaryAdd, 0, s.tensor(3, 4), s.tensor(3, 4), s.tensor(4).Expand(3, 4))
	})
	add("binary-strided", "Binary", func(s *state) {
		be.Binary(tensor.BinaryMul, 0, s.tensor(3, 4), s.tensor(4, 3).Transpose(0, 1), s.tensor(1, 4).Expand(3, 4))
	})
	add("unary-strided", "Unary", func(s *state) { be.Unary(tensor.UnaryReLU, 0, s.tensor(3, 4), s.tensor(4, 3).Transpose(0, 1)) })
	for _, op := range []tensor.UnaryOp{tensor.UnaryNeg, tensor.UnaryScale, tensor.UnaryReLU, tensor.UnaryGELUTanh, tensor.UnaryExp, tensor.UnaryPow} {
		add(fmt.Sprintf("unary-%d", op), "Unary", func(s *state) { be.Unary(op, 2, s.tensor(5), s.tensor(5)) })
	}
	add("relu-bwd", "ReLUBackward", func(s *state) { be.ReLUBackward(s.tensor(5), s.tensor(5), s.tensor(5)) })
	add("gelu-bwd-sum", "GELUTanhBackward", func(s *state) { be.GELUTanhBackward(s.tensor(3, 4), s.tensor(3, 4), s.tensor(3, 4), s.tensor(4)) })
	add("gemm", "Gemm", func(s *state) { be.Gemm(s.tensor(3, 5), s.tensor(3, 4), s.tensor(4, 5), 1, 0) })
	add("gemm-at", "Gemm", func(s *state) { be.Gemm(s.tensor(3, 5), s.tensor(4, 3).Transpose(0, 1), s.tensor(4, 5), 1, 1) })
	add("gemm-batched", "Gemm", func(s *state) { be.Gemm(s.tensor(2, 3, 5), s.tensor(2, 3, 4), s.tensor(2, 4, 5), 1, 0) })
	add("gemm-fold", "Gemm", func(s *state) { be.Gemm(s.tensor(2, 3, 5), s.tensor(2, 3, 4), s.tensor(5, 4).Transpose(0, 1), 1, 0) })
	add("gemm-k0", "Gemm", func(s *state) { be.Gemm(s.tensor(3, 5), s.tensor(3, 0), s.tensor(0, 5), 1, 0.5) })
	add("linear-gelu", "Linear", func(s *state) {
		be.Linear(s.tensor(3, 5), s.tensor(3, 4), s.tensor(5, 4), s.tensor(5), s.tensor(3, 5), s.tensor(3, 5), tensor.GELUTanhAct)
	})
	add("linear-relu", "Linear", func(s *state) {
		be.Linear(s.tensor(3, 5), s.tensor(3, 4), s.tensor(5, 4), nil, nil, nil, tensor.ReLUAct)
	})
	add("linear-k0", "Linear", func(s *state) {
		be.Linear(s.tensor(3, 5), s.tensor(3, 0), s.tensor(5, 0), nil, nil, nil, tensor.Identity)
	})
	add("sum-all", "Sum", func(s *state) { be.Sum(s.tensor(), s.tensor(3, 4)) })
	add("sum-rows", "Sum", func(s *state) { be.Sum(s.tensor(1, 4), s.tensor(3, 4)) })
	add("sum-same", "Sum", func(s *state) { be.Sum(s.tensor(3, 4), s.tensor(3, 4)) })
	add("sum-mid", "Sum", func(s *state) { be.Sum(s.tensor(3, 1, 5), s.tensor(3, 4, 5)) })
	add("fill-strided", "Fill", func(s *state) { be.Fill(s.tensor(4, 3).Transpose(0, 1), 2) })
	add("softmax-dim0", "Softmax", func(s *state) { be.Softmax(s.tensor(3, 4), s.tensor(3, 4), 0, false) })
	add("softmax-bwd-mid", "SoftmaxBackward", func(s *state) {
		be.SoftmaxBackward(s.tensor(2, 3, 4), s.tensor(2, 3, 4), s.tensor(2, 3, 4), 1, false)
	})
	add("log-softmax", "Softmax", func(s *state) { be.Softmax(s.tensor(3, 4), s.tensor(3, 4), 1, true) })
	add("log-softmax-bwd", "SoftmaxBackward", func(s *state) { be.SoftmaxBackward(s.tensor(3, 4), s.tensor(3, 4), s.tensor(3, 4), 1, true) })
	add("softmax", "Softmax", func(s *state) { be.Softmax(s.tensor(3, 4), s.tensor(3, 4), 1, false) })
	add("softmax-bwd", "SoftmaxBackward", func(s *state) { be.SoftmaxBackward(s.tensor(3, 4), s.tensor(3, 4), s.tensor(3, 4), -1, false) })
	add("ce-mean", "CrossEntropy", func(s *state) { be.CrossEntropy(s.tensor(), s.tensor(4, V), s.tensor(4, V), tg[:3], ce) })
	add("ce-none", "CrossEntropy", func(s *state) { be.CrossEntropy(s.tensor(4), s.tensor(4, V), s.tensor(4, V), tg, ign) })
	add("ce-sum", "CrossEntropy", func(s *state) {
		be.CrossEntropy(s.tensor(), s.tensor(4, V), s.tensor(4, V), tg, tensor.CrossEntropyOptions{Reduction: tensor.ReduceSum})
	})
	add("ce-bwd-none", "CrossEntropyBackward", func(s *state) {
		be.CrossEntropyBackward(s.tensor(4, V), s.tensor(4), tg, tensor.CrossEntropyOptions{Reduction: tensor.ReduceNone, Ignore: true, IgnoreIndex: -100})
	})
	add("ce-bwd", "CrossEntropyBackward", func(s *state) { be.CrossEntropyBackward(s.tensor(4, V), s.tensor(), tg, ign) })
	add("layernorm", "LayerNorm", func(s *state) {
		be.LayerNorm(s.tensor(6, d), s.tensor(6), s.tensor(6), s.tensor(6, d), s.tensor(d), s.tensor(d), 1e-5)
	})
	add("layernorm-now", "LayerNorm", func(s *state) { be.LayerNorm(s.tensor(6, d), s.tensor(6), s.tensor(6), s.tensor(6, d), nil, nil, 1e-5) })
	add("layernorm-bwd", "LayerNormBackward", func(s *state) {
		be.LayerNormBackward(s.tensor(6, d), s.tensor(d), s.tensor(d), s.tensor(6, d), s.tensor(6, d), s.tensor(d), s.tensor(6), s.tensor(6))
	})
	add("attention", "Attention", func(s *state) { be.Attention(s.tensor(B, T, d), s.tensor(B, T, 3*d), H, true) })
	add("attention-bwd", "AttentionBackward", func(s *state) {
		be.AttentionBackward(s.tensor(B, T, 3*d), s.tensor(B, T, d), s.tensor(B, T, 3*d), s.tensor(B, H, T), H, true)
	})
	add("conv-relu", "Conv2d", func(s *state) {
		be.Conv2d(s.tensor(2, 4, 6, 6), s.tensor(2, 3, 8, 8), s.tensor(4, 3, 3, 3), s.tensor(4), 1, 0, tensor.ReLUAct)
	})
	add("conv-bwd-relu", "Conv2dBackward", func(s *state) {
		be.Conv2dBackward(s.tensor(2, 3, 8, 8), s.tensor(4, 3, 3, 3), s.tensor(4), s.tensor(2, 4, 6, 6), s.tensor(2, 4, 6, 6), s.tensor(2, 3, 8, 8), s.tensor(4, 3, 3, 3), 1, 0, tensor.ReLUAct)
	})
	add("maxpool", "MaxPool2d", func(s *state) { be.MaxPool2d(s.tensor(2, 3, 4, 4), s.tensor(2, 3, 8, 8), 2, 2, 0) })
	add("maxpool-bwd", "MaxPool2dBackward", func(s *state) {
		be.MaxPool2dBackward(s.tensor(2, 3, 8, 8), s.tensor(2, 3, 4, 4), s.tensor(2, 3, 8, 8), 2, 2, 0)
	})
	add("avgpool", "AvgPool2d", func(s *state) { be.AvgPool2d(s.tensor(2, 3, 4, 4), s.tensor(2, 3, 8, 8), 2, 2, 0) })
	add("avgpool-bwd", "AvgPool2dBackward", func(s *state) { be.AvgPool2dBackward(s.tensor(2, 3, 8, 8), s.tensor(2, 3, 4, 4), 2, 2, 0) })
	add("index-rows", "IndexRows", func(s *state) { be.IndexRows(s.tensor(3, 4), s.tensor(V, 4), []int64{2, 0, 2}) })
	add("index-add-rows", "IndexAddRows", func(s *state) { be.IndexAddRows(s.tensor(V, 4), []int64{2, 0, 2}, s.tensor(3, 4)) })
	add("adam", "AdamUpdate", func(s *state) {
		be.AdamUpdate(s.tensor(7), s.tensor(7), s.tensor(7), s.tensor(7), s.tensor(7), optim.AdamHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, AMSGrad: true}, 1)
	})
	add("sgd", "SGDUpdate", func(s *state) {
		be.SGDUpdate(s.tensor(7), s.tensor(7), s.tensor(7), optim.SGDHyper{LR: 0.1, Momentum: 0.9}, 2)
	})
	add("grad-norm", "GradNorm", func(s *state) { be.GradNorm(s.tensor(7), 2) })
	add("grad-norm-inf", "GradNorm", func(s *state) { be.GradNorm(s.tensor(7), math.Inf(1)) })
	add("ce-smooth", "CrossEntropy", func(s *state) {
		be.CrossEntropy(s.tensor(), s.tensor(4, V), s.tensor(4, V), tg, tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100, LabelSmoothing: 0.1})
	})
	add("ce-bwd-smooth", "CrossEntropyBackward", func(s *state) {
		be.CrossEntropyBackward(s.tensor(4, V), s.tensor(), tg, tensor.CrossEntropyOptions{LabelSmoothing: 0.1, Ignore: true, IgnoreIndex: -100})
	})
	add("grad-norm-1", "GradNorm", func(s *state) { be.GradNorm(s.tensor(7), 1) })
	return cs
}

// TestDryRun runs every Backend method on a dry device: each launch's
// arguments are packed against the kernel table's parameter list (a
// mismatch panics), each geometry comes from the table, each GEMM is
// well formed, and the kernels each method launches are those its path
// lists, all of them covered by the cases.
func TestDryRun(t *testing.T) {
	used := map[string]map[string]bool{}
	for _, c := range dryCases() {
		t.Run(c.name, func(t *testing.T) {
			s := dry()
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s: %v", c.method, r)
					}
				}()
				c.run(s)
			}()
			if used[c.method] == nil {
				used[c.method] = map[string]bool{}
			}
			for _, l := range s.dry.launches {
				if l.kernel == "cuMemcpyDtoDAsync" {
					continue
				}
				if !slices.Contains(paths[c.method].kernels, l.kernel) {
					t.Errorf("%s launched %s, which its path does not list", c.method, l.kernel)
				}
				used[c.method][l.kernel] = true
				if l.geometry.Threads() > 1024 || l.geometry.Threads() < 1 {
					t.Errorf("%s: %s with %d threads a block", c.method, l.kernel, l.geometry.Threads())
				}
			}
		})
	}
	for m, pa := range paths {
		for _, k := range pa.kernels {
			if !used[m][k] {
				t.Errorf("%s: kernel %s of its path was never launched by the dry cases", m, k)
			}
		}
	}
}

// TestMissingNamesOpAndDevice: a form with no kernel panics naming the op
// and the device, with no CPU fallback.
func TestMissingNamesOpAndDevice(t *testing.T) {
	s := dry()
	for name, f := range map[string]func(){
		"Unary":    func() { backend{}.Unary(tensor.UnaryOp(200), 0, s.tensor(3), s.tensor(3)) },
		"Binary":   func() { backend{}.Binary(tensor.BinaryOp(200), 0, s.tensor(3), s.tensor(3), s.tensor(3)) },
		"GradNorm": func() { backend{}.GradNorm(s.tensor(3), math.NaN()) },
		"Copy":     func() { backend{}.Copy(s.tensor(2, 2, 2, 2, 2), s.tensor(2, 2, 2, 2, 2).Permute(4, 2, 0, 3, 1)) },
	} {
		msg := func() (m string) {
			defer func() { m = fmt.Sprint(recover()) }()
			f()
			return ""
		}()
		if !strings.HasPrefix(msg, "cudatensor: "+name+" on cuda:0: no CUDA kernel for ") {
			t.Errorf("%s: panic %q, want one naming the op, the device and what is missing", name, msg)
		}
	}
}

// TestKernelsCompile compiles the families of every kernel the backend
// launches with the real NVRTC for compute_80 and compute_90, and checks
// each kernel has its entry in the PTX.
func TestKernelsCompile(t *testing.T) {
	lib := cudatest.Load(t, "NVRTC", nvrtc.Load, nvrtc.ErrNotFound)
	t.Logf("NVRTC %s from %s", lib.VersionString(), lib.Path)
	byFamily := map[string][]string{}
	for _, pa := range paths {
		for _, name := range pa.kernels {
			k, _ := lookup(name)
			if !slices.Contains(byFamily[k.Family], name) {
				byFamily[k.Family] = append(byFamily[k.Family], name)
			}
		}
	}
	fams := make([]string, 0, len(byFamily))
	for f := range byFamily {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	cache := t.TempDir()
	for _, f := range fams {
		src, err := source(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, arch := range []string{"compute_80", "compute_90"} {
			t.Run(f+"/"+arch, func(t *testing.T) {
				ptx, err := lib.Compile(src, f+".cu", nvrtc.Options{Arch: arch, CacheDir: cache})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range byFamily[f] {
					if !strings.Contains(ptx.PTX, ".entry "+k+"(") {
						t.Errorf("PTX for %s has no entry %s", arch, k)
					}
				}
			})
		}
	}
}

// TestSegments checks the counting sort behind IndexAddRows.
// TestUnaryCodes: every unary and binary op has a kernel path.
func TestUnaryCodes(t *testing.T) {
	for op := tensor.UnaryNeg; op <= tensor.UnaryPow; op++ {
		switch op {
		case tensor.UnaryNeg, tensor.UnaryScale, tensor.UnaryReLU, tensor.UnaryGELUTanh:
			continue
		}
		if unaryCodes[op] == 0 {
			t.Errorf("unary op %d has no code", op)
		}
	}
	src, _ := source(stridedFamily)
	for op, code := range unaryCodes {
		if !strings.Contains(src, fmt.Sprintf(" %d\n", code)) {
			t.Errorf("unary op %d: code %d not defined in the source", op, code)
		}
	}
}

func TestSegments(t *testing.T) {
	order, start, id := segments([]int64{5, 2, 5, 7, 2, 5})
	if !slices.Equal(order, []int32{0, 2, 5, 1, 4, 3}) || !slices.Equal(start, []int32{0, 3, 5, 6}) || !slices.Equal(id, []int32{5, 2, 7}) {
		t.Fatalf("segments: order %v start %v id %v", order, start, id)
	}
}

// TestLocalSignatures checks this package's kernel entries against the
// signatures in strided.cu, as device/kernels checks its table.
func TestLocalSignatures(t *testing.T) {
	src, _ := source(stridedFamily)
	flat := strings.Join(strings.Fields(src), " ")
	for _, k := range localKernels {
		var decl []string
		for _, p := range k.Params {
			decl = append(decl, p.Type+" "+p.Name)
		}
		want := `extern "C" __global__ void ` + k.Name + "(" + strings.Join(decl, ", ") + ")"
		if !strings.Contains(flat, want) {
			t.Errorf("strided.cu has no %s", want)
		}
	}
}

// TestOutOfMemory: a buffer the device cannot hold panics with the
// allocator's error (the size, what is reserved, the remedies), naming
// the device. The memory is device/fakedev's, of 64 MiB.
func TestOutOfMemory(t *testing.T) {
	s := &state{dev: tensor.CUDA(0), mem: alloc.New(fakedev.New(64 << 20))}
	msg := func() (m string) {
		defer func() { m = fmt.Sprint(recover()) }()
		backend{dry: s}.Alloc(s.dev, tensor.Float32, 1<<26) // 256 MiB
		return ""
	}()
	for _, want := range []string{"cudatensor: Alloc: 67108864 float32 elements on cuda:0: ", "out of device memory", "256.00 MiB", "reserved", "remedies"} {
		if !strings.Contains(msg, want) {
			t.Errorf("panic %q lacks %q", msg, want)
		}
	}
}
