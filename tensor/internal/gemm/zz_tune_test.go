package gemm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func TestTune(t *testing.T) {
	spec := os.Getenv("TUNE")
	if spec == "" {
		t.Skip()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// TUNE=kernel:mc:kc:nc;shape...
	parts := strings.Split(spec, ";")
	shapes := [][5]int{}
	for _, s := range strings.Split(os.Getenv("SHAPES"), ",") {
		f := strings.Split(s, "x")
		var v [5]int
		for i := range f {
			v[i], _ = strconv.Atoi(f[i])
		}
		shapes = append(shapes, v)
	}
	for _, p := range parts {
		f := strings.Split(p, ":")
		g, _ := New(Options{BLAS: BLASGo, Kernel: f[0], Threads: 1})
		if len(f) > 1 && f[0] != "wide" {
			ar := *g.arch
			ar.mc, _ = strconv.Atoi(f[1])
			ar.kc, _ = strconv.Atoi(f[2])
			ar.nc, _ = strconv.Atoi(f[3])
			g.arch = &ar
		}
		if f[0] == "wide" {
			g, _ = New(Options{BLAS: BLASGo, Kernel: "avx512", Threads: 1})
			ar := *avx512WideArch()
			if len(f) > 1 {
				ar.mc, _ = strconv.Atoi(f[1])
				ar.kc, _ = strconv.Atoi(f[2])
				ar.nc, _ = strconv.Atoi(f[3])
			}
			g.arch = &ar
		}
		if f[0] == "openblas" {
			g, _ = New(Options{BLAS: BLASOpenBLAS, Threads: 1})
		}
		var line []string
		for _, s := range shapes {
			m, n, k, ta, tb := s[0], s[1], s[2], s[3] == 1, s[4] == 1
			rng := rand.New(rand.NewPCG(1, 1))
			a := make([]float32, m*k)
			b := make([]float32, k*n)
			c := make([]float32, m*n)
			for i := range a {
				a[i] = rng.Float32()
			}
			for i := range b {
				b[i] = rng.Float32()
			}
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			var rs []float64
			for r := 0; r < 7; r++ {
				g.Sgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n)
				st := threadCPU()
				it := 0
				for threadCPU()-st < 30*time.Millisecond {
					g.Sgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n)
					it++
				}
				el := threadCPU() - st
				rs = append(rs, 2*float64(m*n*k)*float64(it)/el.Seconds()/1e9)
			}
			slices.Sort(rs)
			line = append(line, fmt.Sprintf("%6.1f", rs[3]))
		}
		fmt.Printf("%-28s %s\n", p, strings.Join(line, " "))
	}
}
