package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cohortml/cohort/device/cublas"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/tensor"
)

// gemmCUDA times cuBLAS n×n×n products on dev as the PyTorch anchor
// (bench/anchors/gpt2_bench.py --gemm N) times torch.matmul: 60 products,
// each between two CUDA events, the first 10 dropped, the median kept.
// fp32 runs cublasSgemm with TF32 off (PyTorch's default); bf16 runs
// cublasGemmEx with bf16 inputs and output and fp32 accumulation (what
// x @ y computes for bf16 tensors). One line per dtype goes to w.
func gemmCUDA(w io.Writer, dev tensor.Device, n int) error {
	c, err := cuda.Open(dev.Index())
	if err != nil {
		return err
	}
	defer c.Close()
	lib, err := cublas.Load()
	if err != nil {
		return err
	}
	h, err := lib.Create(c, cublas.Options{TF32: false})
	if err != nil {
		return err
	}
	defer h.Destroy()
	rng := rand.New(rand.NewPCG(0, 0))
	x := make([]float32, n*n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	xb := make([]uint16, n*n)
	for i, v := range x {
		xb[i] = bf16(v)
	}
	var ptrs []cuda.DevicePtr
	defer func() {
		for _, p := range ptrs {
			c.MemFree(p)
		}
	}()
	alloc := func(bytes int64) (cuda.DevicePtr, error) {
		p, err := c.MemAlloc(bytes)
		if err == nil {
			ptrs = append(ptrs, p)
		}
		return p, err
	}
	start, err := c.NewEvent(true)
	if err != nil {
		return err
	}
	defer c.DestroyEvent(start)
	end, err := c.NewEvent(true)
	if err != nil {
		return err
	}
	defer c.DestroyEvent(end)
	fmt.Fprintf(w, "gemm: %v %s, cuBLAS %s, n %d (60 products, median of the last 50, CUDA events)\n", dev, c.Device, lib.Version(), n)
	for _, dtype := range []string{"fp32", "bf16"} {
		size := int64(4)
		if dtype == "bf16" {
			size = 2
		}
		var a, b, out cuda.DevicePtr
		for _, p := range []*cuda.DevicePtr{&a, &b, &out} {
			if *p, err = alloc(size * int64(n*n)); err != nil {
				return err
			}
		}
		if dtype == "fp32" {
			err = errors2(cuda.ToDevice(c, a, x), cuda.ToDevice(c, b, x))
		} else {
			err = errors2(cuda.ToDevice(c, a, xb), cuda.ToDevice(c, b, xb))
		}
		if err != nil {
			return err
		}
		g := cublas.Gemm{M: n, N: n, K: n, Alpha: 1, A: a, B: b, C: out, LDA: n, LDB: n, LDC: n, AType: cublas.BF16, BType: cublas.BF16, CType: cublas.BF16}
		var ms []float64
		for i := range 60 {
			if err := c.Record(start, 0); err != nil {
				return err
			}
			if dtype == "fp32" {
				err = h.Sgemm(g)
			} else {
				err = h.GemmEx(g)
			}
			if err != nil {
				return err
			}
			if err := c.Record(end, 0); err != nil {
				return err
			}
			if err := c.EventSync(end); err != nil {
				return err
			}
			d, err := c.Elapsed(start, end)
			if err != nil {
				return err
			}
			if i >= 10 {
				ms = append(ms, float64(d)/float64(time.Millisecond))
			}
		}
		slices.Sort(ms)
		med := (ms[len(ms)/2-1] + ms[len(ms)/2]) / 2 // statistics.median of an even count
		fmt.Fprintf(w, "gemm: cuda %s n %d ms %.4f GFLOP/s %.0f\n", dtype, n, med, 2*math.Pow(float64(n), 3)/med/1e6)
	}
	return nil
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// bf16 rounds v to bfloat16 bits, to nearest even (finite inputs).
func bf16(v float32) uint16 {
	u := math.Float32bits(v)
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
