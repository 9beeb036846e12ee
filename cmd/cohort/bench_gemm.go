package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/cohortml/cohort/bench"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/gemmbench"
)

// benchGemm runs `cohort bench gemm`: cohort's sgemm against OpenBLAS,
// alternating, over the shapes of gemmbench.Shapes.
func benchGemm(args []string) int {
	fs := flag.NewFlagSet("cohort bench gemm", flag.ContinueOnError)
	threads := fs.String("threads", "1,2", "comma-separated thread counts")
	rounds := fs.Int("rounds", 7, "alternating rounds per row (the median is reported)")
	minTime := fs.Duration("min-time", 40*time.Millisecond, "minimum timed duration per round and implementation")
	kernel := fs.String("kernel", "", "cohort kernel: avx512bf16, avx512, avx2 or go (default: the best the CPU has)")
	lib := fs.String("openblas", "", "OpenBLAS library to compare with (default libopenblas.so.0)")
	dtype := fs.String("dtype", "fp32", "fp32: cohort against OpenBLAS; bf16: cohort's bfloat16 product against its float32 one (CPU)")
	device := fs.String("device", "cpu", "cpu, or cuda[:N]: cuBLAS fp32 (TF32 off) and bf16 products of --n cubed, as the PyTorch anchor's --gemm")
	n := fs.Int("n", 4096, "with --device cuda: the product's size n (n×n times n×n)")
	only := fs.String("shapes", "", "comma-separated shape names to run (default: all); a name ending in * selects every shape it prefixes (\"gpt*\")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cohort bench gemm: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *dtype != "fp32" && *dtype != "bf16" {
		fmt.Fprintf(os.Stderr, "cohort bench gemm: --dtype %q: want fp32 or bf16\n", *dtype)
		return 2
	}
	if dev, err := tensor.ParseDevice(*device); err != nil || dev.Kind() != "cpu" && dev.Kind() != "cuda" || *n < 1 {
		fmt.Fprintf(os.Stderr, "cohort bench gemm: --device %q --n %d: want cpu or cuda[:N] and n ≥ 1\n", *device, *n)
		return 2
	} else if !dev.IsCPU() {
		if err := bench.GemmCUDA(os.Stdout, dev, *n); err != nil {
			fmt.Fprintf(os.Stderr, "cohort bench gemm: %v\n", err)
			return 1
		}
		return 0
	}
	o := gemmbench.Options{Rounds: *rounds, MinTime: *minTime, Kernel: *kernel, OpenBLASLib: *lib}
	for _, f := range strings.Split(*threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "cohort bench gemm: --threads %q: want positive integers separated by commas\n", *threads)
			return 2
		}
		o.Threads = append(o.Threads, n)
	}
	if *only != "" {
		want := map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			want[strings.TrimSpace(s)] = true
		}
		seen := map[string]bool{}
		for _, s := range gemmbench.Shapes() {
			for w := range want {
				if w == s.Name || strings.HasSuffix(w, "*") && strings.HasPrefix(s.Name, strings.TrimSuffix(w, "*")) {
					o.Shapes = append(o.Shapes, s)
					seen[w] = true
					break
				}
			}
		}
		for w := range seen {
			delete(want, w)
		}
		for name := range want {
			fmt.Fprintf(os.Stderr, "cohort bench gemm: unknown shape %q\n", name)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *dtype == "bf16" {
		return benchGemmBF16(ctx, o)
	}
	if _, err := gemmbench.Run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench gemm: %v\n", err)
		return 1
	}
	return 0
}

// benchGemmBF16 runs `cohort bench gemm --dtype bf16` with o's settings.
func benchGemmBF16(ctx context.Context, o gemmbench.Options) int {
	bo := gemmbench.BF16Options{Shapes: o.Shapes, Threads: o.Threads, Rounds: o.Rounds, MinTime: o.MinTime, Kernel: o.Kernel}
	if _, err := gemmbench.RunBF16(ctx, os.Stdout, bo); err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench gemm: %v\n", err)
		return 1
	}
	return 0
}
