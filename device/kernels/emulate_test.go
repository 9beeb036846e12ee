package kernels_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// The emulator runs the generated CUDA C on the CPU (testdata/emu/cuda_emu.h:
// each CUDA thread a coroutine, waiting at __syncthreads and warp shuffles
// for the rest of its block or warp), launched from the table exactly as a runtime would: the
// table's geometry and parameter list, pointer arguments passed by
// address. It checks the kernels' indexing, synchronisation and math
// against their CPU twins without a GPU; it says nothing of speed, and
// memory-model questions (a missing __syncthreads that happens to work on
// one SM) remain for the GPU check. It needs g++ (C++20, ucontext) and
// skips, saying so, without one.

var emuBuilds sync.Map // family → *emuBuild

type emuBuild struct {
	once sync.Once
	bin  string
	err  error
}

var (
	asmRE    = regexp.MustCompile(`asm\("cvt\.rn\.bf16\.f32 %0, %1;" : "=h"\(r\.bits\) : "f"\(x\)\);`)
	dynSmemR = regexp.MustCompile(`extern __shared__ float (\w+)\[\];`)
)

// emulator returns the emulator binary of a family, building it once per
// test process.
func emulator(t *testing.T, family string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode: the kernel emulator is built with g++")
	}
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("skipped: no g++ to build the kernel emulator: %v", err)
	}
	v, _ := emuBuilds.LoadOrStore(family, &emuBuild{})
	b := v.(*emuBuild)
	b.once.Do(func() { b.bin, b.err = buildEmulator(gxx, family) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func buildEmulator(gxx, family string) (string, error) {
	src, err := kernels.Source(family)
	if err != nil {
		return "", err
	}
	if !asmRE.MatchString(src) {
		return "", fmt.Errorf("emulator: the prelude's bf16 rounding changed; update asmRE")
	}
	src = asmRE.ReplaceAllLiteralString(src, "r.bits = emu_bf16_bits(x);")
	var ks []kernels.Kernel
	for _, k := range kernels.Table() {
		if k.Family == family {
			ks = append(ks, k)
		}
	}
	return compileEmulator(gxx, family, src, ks)
}

// emuDirs are the emulators' build directories, removed by TestMain.
var emuDirs struct {
	sync.Mutex
	list []string
}

// compileEmulator builds an emulator of the kernels ks defined in src.
func compileEmulator(gxx, name, src string, ks []kernels.Kernel) (string, error) {
	src = dynSmemR.ReplaceAllString(src, "float* $1 = emu_dyn_smem;")
	var b strings.Builder
	b.WriteString("#include \"cuda_emu.h\"\n\n")
	b.WriteString(src)
	b.WriteString("\n// Launch glue from the table.\n")
	var lookup strings.Builder
	for _, k := range ks {
		var args []string
		for i, p := range k.Params {
			if strings.HasSuffix(p.Type, "*") {
				args = append(args, fmt.Sprintf("(%s)(*(void**)a[%d])", p.Type, i))
			} else {
				args = append(args, fmt.Sprintf("*(%s*)a[%d]", p.Type, i))
			}
		}
		fmt.Fprintf(&b, "static void emu_%s(void** a) { %s(%s); }\n", k.Name, k.Name, strings.Join(args, ", "))
		fmt.Fprintf(&lookup, "\tif (!strcmp(n, %q)) return emu_%s;\n", k.Name, k.Name)
	}
	fmt.Fprintf(&b, "\nstatic emu_fn lookup(const char* n) {\n%s\treturn nullptr;\n}\n\nint main(int argc, char** argv) { return emu_main(argc, argv, lookup); }\n", lookup.String())
	dir, err := os.MkdirTemp("", "cohort-emu-")
	if err != nil {
		return "", err
	}
	emuDirs.Lock()
	emuDirs.list = append(emuDirs.list, dir)
	emuDirs.Unlock()
	cpp := filepath.Join(dir, name+".cpp")
	if err := os.WriteFile(cpp, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	inc, err := filepath.Abs(filepath.Join("testdata", "emu"))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command(gxx, "-std=c++20", "-O1", "-U_FORTIFY_SOURCE", "-ffp-contract=off", "-fno-fast-math", "-w", "-I", inc, "-o", bin, cpp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("emulator: g++ %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// bf16 holds bf16 bits; a []bf16 argument is a bf16* buffer.
type bf16 uint16

// launch runs kernel name on problem p with args in the table's parameter
// order: slices for pointers ([]float32, []bf16, []int32, []int64; their
// contents are written back after the run), int/int64/float32 for scalars.
func launch(t *testing.T, name string, p kernels.Problem, args ...any) {
	t.Helper()
	k, ok := kernels.Lookup(name)
	if !ok {
		t.Fatalf("no kernel %s", name)
	}
	if len(args) != len(k.Params) {
		t.Fatalf("%s: %d arguments for %d parameters", name, len(args), len(k.Params))
	}
	g, err := k.Launch(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.Grid[0]*g.Grid[1]*g.Grid[2] == 0 {
		return
	}
	bin := emulator(t, k.Family)
	launched.Store(name, true)
	dir := t.TempDir()
	spec := fmt.Sprintf("kernel %s\ngrid %d %d %d\nblock %d %d %d\nshared %d\n", name, g.Grid[0], g.Grid[1], g.Grid[2], g.Block[0], g.Block[1], g.Block[2], g.SharedBytes)
	type back struct {
		path string
		dst  any
	}
	var backs []back
	for i, a := range args {
		pt := strings.TrimPrefix(k.Params[i].Type, "const ")
		var line string
		switch v := a.(type) {
		case []float32, []bf16, []int32, []int64:
			want := map[string]string{"[]float32": "float*", "[]kernels_test.bf16": "bf16*", "[]int32": "int*", "[]int64": "long long*"}[fmt.Sprintf("%T", v)]
			if pt != want {
				t.Fatalf("%s: argument %d (%s) is %T", name, i, k.Params[i].Type, a)
			}
			path := filepath.Join(dir, fmt.Sprintf("arg%d", i))
			var raw []byte
			raw, _ = binary.Append(raw, binary.LittleEndian, v)
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			line = "buf " + path
			backs = append(backs, back{path, v})
		case int:
			switch pt {
			case "int":
				line = "i32 " + strconv.Itoa(v)
			case "long long":
				line = "i64 " + strconv.Itoa(v)
			default:
				t.Fatalf("%s: argument %d (%s) is int", name, i, k.Params[i].Type)
			}
		case float32:
			if pt != "float" {
				t.Fatalf("%s: argument %d (%s) is float32", name, i, k.Params[i].Type)
			}
			line = "f32 " + strconv.FormatFloat(float64(v), 'g', -1, 32)
		default:
			t.Fatalf("%s: argument %d has type %T", name, i, a)
		}
		spec += line + "\n"
	}
	sp := filepath.Join(dir, "spec")
	if err := os.WriteFile(sp, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, sp).CombinedOutput(); err != nil {
		t.Fatalf("emulated %s: %v\n%s", name, err, out)
	}
	for _, b := range backs {
		raw, err := os.ReadFile(b.path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := binary.Decode(raw, binary.LittleEndian, b.dst); err != nil {
			t.Fatal(err)
		}
	}
}

// toBF16 rounds to nearest even (NaN kept), as the kernels' round_bf16:
// the CPU's rounding, tensor.ToBFloat16.
func toBF16(x float32) bf16 {
	var b [1]uint16
	tensor.ToBFloat16(b[:], []float32{x})
	return bf16(b[0])
}

func (b bf16) f32() float32 { return math.Float32frombits(uint32(b) << 16) }

func bf16s(x []float32) []bf16 {
	out := make([]bf16, len(x))
	for i, v := range x {
		out[i] = toBF16(v)
	}
	return out
}

func widen(x []bf16) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = v.f32()
	}
	return out
}

// relErr is ‖got − want‖ / ‖want‖, or ‖got − want‖ where want is all
// zeros.
func relErr(got, want []float32) float64 {
	diff, norm := tensortest.L2Diff(got, want)
	if norm == 0 {
		return diff
	}
	return diff / norm
}

func checkRel(t *testing.T, what string, got, want []float32, bound float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i, v := range got {
		if math.IsNaN(float64(v)) != math.IsNaN(float64(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, v, want[i])
		}
	}
	if e := relErr(got, want); e > bound {
		t.Errorf("%s: ‖gpu − cpu‖/‖cpu‖ = %.3g, bound %.3g", what, e, bound)
	} else {
		t.Logf("%s: ‖gpu − cpu‖/‖cpu‖ = %.3g (bound %.3g)", what, e, bound)
	}
}

func checkBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s[%d] = %v, CPU %v: want the same bits", what, i, got[i], want[i])
			return
		}
	}
}

// TestEmulator checks the emulator itself: warp shuffles exchange lanes'
// values, __syncthreads orders shared memory, and a barrier that can never
// complete is reported as a deadlock rather than hanging.
func TestEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: the kernel emulator is built with g++")
	}
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("skipped: no g++ to build the kernel emulator: %v", err)
	}
	const src = `
extern "C" __global__ void shuffles(float* out) {
	__shared__ float s[64];
	float v = threadIdx.x;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o); // each warp's lane sum
	s[threadIdx.x] = __shfl_sync(0xffffffffu, (float)threadIdx.x, 31 - (threadIdx.x & 31));
	__syncthreads();
	out[threadIdx.x] = v + 1000.0f * s[63 - threadIdx.x];
}
extern "C" __global__ void divergent(float* out) {
	if (threadIdx.x < 16)
		__syncthreads();
	else
		out[0] = __shfl_sync(0xffffffffu, 1.0f, 0);
}
`
	ks := []kernels.Kernel{{Name: "shuffles", Params: []kernels.Param{{Type: "float*", Name: "out"}}}, {Name: "divergent", Params: []kernels.Param{{Type: "float*", Name: "out"}}}}
	bin, err := compileEmulator(gxx, "selftest", src, ks)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	buf := filepath.Join(dir, "out")
	if err := os.WriteFile(buf, make([]byte, 64*4), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(kernel string, threads int) ([]byte, error) {
		spec := filepath.Join(dir, "spec")
		os.WriteFile(spec, fmt.Appendf(nil, "kernel %s\ngrid 1 1 1\nblock %d 1 1\nshared 0\nbuf %s\n", kernel, threads, buf), 0o644)
		return exec.Command(bin, spec).CombinedOutput()
	}
	if out, err := run("shuffles", 64); err != nil {
		t.Fatalf("shuffles: %v\n%s", err, out)
	}
	raw, _ := os.ReadFile(buf)
	got := make([]float32, 64)
	binary.Decode(raw, binary.LittleEndian, got)
	for i, v := range got {
		w := i &^ 31
		laneSum := float32(32*w + 31*32/2)
		// s[j] holds the thread index of lane 31 − (j mod 32) in j's warp.
		j := 63 - i
		if want := laneSum + 1000*float32(j&^31+31-j&31); v != want {
			t.Errorf("shuffles: out[%d] = %v, want %v", i, v, want)
		}
	}
	out, err := run("divergent", 32)
	if err == nil || !strings.Contains(string(out), "deadlock") {
		t.Errorf("divergent barriers: %v, output %q; want a deadlock error", err, out)
	}
}
