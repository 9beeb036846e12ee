package nvrtc_test

import (
	"fmt"
	"log"

	"github.com/cohortml/cohort/device/nvrtc"
)

// Compile a kernel for the A100's architecture; the PTX goes to
// cuda.Context.LoadModule.
func ExampleCompile() {
	src := `extern "C" __global__ void scale(int n, float a, float *x) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] *= a;
}`
	ptx, err := nvrtc.Compile(src, "scale.cu", nvrtc.Options{Arch: "compute_80", Flags: []string{"-lineinfo"}})
	if err != nil {
		log.Fatal(err) // a *CompileError prints NVRTC's log
	}
	fmt.Println(len(ptx.PTX) > 0, ptx.Cached)
}
