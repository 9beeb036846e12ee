// Package extras names the optional software cohort uses when a machine
// has it (libraries loaded at run time, found the way the packages using
// them find them; tools that some tests drive),
// looks for each, and says which tests skip without it. Everything else
// needs only Go.
//
// `go test ./...` shows a test's skip reason only with -v, so a quiet run
// does not say what it left out; `cohort doctor` prints this list, found
// or absent, with the tests each absence skips. The list is data, checked
// by this package's test against the test sources, so that a renamed test
// fails here rather than drop out of the list.
package extras

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/cohortml/cohort/device/cublas"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/nvrtc"
	"github.com/ebitengine/purego"
)

// Extra is one piece of optional software.
type Extra struct {
	Name    string
	Use     string   // what cohort does with it
	Install string   // how to get it on Debian
	Tests   []string // the tests that skip without it: "dir.TestName", "dir.TestName/subtest" or "dir.TestPrefix*" (dir from the module root)
	find    func(ctx context.Context) (where string, err error)
}

// Status is an Extra looked for on this machine.
type Status struct {
	Extra
	Where string // the library or program found; "" when absent
	Err   error  // why it is absent; nil when found
}

// Gate is a group of long tests that run only when an environment
// variable asks for them (.ci/run sets them).
type Gate struct {
	Var   string // NAME=VALUE that turns them on
	What  string
	Tests []string // as Extra.Tests
}

// List returns the optional extras, in the order `cohort doctor` prints
// them.
func List() []Extra {
	return []Extra{
		{
			Name: "OpenBLAS", Use: "a second GEMM backend (COHORT_BLAS=openblas)", Install: "apt-get install libopenblas0",
			Tests: []string{"tensor/internal/blas.TestConformance", "tensor/internal/blas.TestThreads", "tensor/internal/blas.TestSgemmAllocs",
				"tensor/internal/gemm.TestConformanceOpenBLAS"},
			find: library("COHORT_OPENBLAS_LIB", "libopenblas.so.0"),
		},
		{
			Name: "MPI library", Use: "the MPI backend (COHORT_BACKEND=mpi under mpirun or srun)", Install: "apt-get install libopenmpi3",
			Tests: []string{"distributed/internal/mpi.TestLoad", "distributed/backend/mpi.TestMPIConformance", "distributed/backend/mpi.TestMPIPeerDeath"},
			find:  library("COHORT_MPI_LIBRARY", "libmpi.so.40", "libmpi.so.12", "libmpi.so"),
		},
		{
			Name: "mpirun", Use: "starting ranks the MPI way", Install: "apt-get install openmpi-bin",
			Tests: []string{"distributed/backend/mpi.TestMPIConformance", "distributed/backend/mpi.TestMPIPeerDeath", "bench/collbench.TestSpawnMPI", "tests/cluster.TestMpirun"},
			find:  program("mpirun"),
		},
		{
			Name: "Slurm and munge", Use: "the Slurm cluster test (also needs root and COHORT_CLUSTER_TESTS=1)", Install: "apt-get install slurmctld slurmd slurm-client munge",
			Tests: []string{"tests/cluster.TestSlurm"},
			find:  program("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "munge", "munged"),
		},
		{
			Name: "root with iproute2", Use: "tests of several hosts in network namespaces, and of a full disk on a tmpfs", Install: "run as root; apt-get install iproute2",
			Tests: []string{"tests/multihost.TestMultiHost", "checkpoint.TestDiskFullTmpfs"},
			find:  rootWith("ip", "tc", "nsenter"),
		},
		{
			Name: "Chromium", Use: "the run page's test in a real browser", Install: "apt-get install chromium",
			Tests: []string{"obs/dashboard.TestPageInChromium", "examples/mnist.TestRunPageInChromium"},
			find:  anyProgram("chromium", "chromium-browser", "google-chrome", "headless-shell"),
		},
		{
			Name: "PyTorch", Use: "the interoperability tests and bench/'s side-by-side scripts", Install: "apt-get install python3-torch python3-numpy",
			Tests: []string{"checkpoint.TestGPTLoadsInPyTorch", "checkpoint.TestBF16FromPyTorch", "checkpoint.TestBF16LoadsInPyTorch", "examples/mnist.TestPyTorchLoadsWeights", "examples/gpt.TestPyTorchCurve"},
			find:  python("/usr/bin/python3", "import torch, numpy"),
		},
		{
			Name: "CUDA driver", Use: "the device packages (libcuda.so.1, loaded at run time)", Install: "the NVIDIA driver, or Debian's libcuda1 (non-free)",
			Tests: []string{"device/cuda.TestDriverLoads", "device/cuda.TestInitWithoutDevice"},
			find: func(context.Context) (string, error) {
				d, err := cuda.Load()
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s (CUDA %d.%d)", d.Path, d.Version/1000, d.Version%1000/10), nil
			},
		},
		{
			Name: "a CUDA device", Use: "the device packages' GPU tests", Install: "a machine with an NVIDIA GPU",
			Tests: []string{"device/cuda.TestGPU*", "device/alloc.TestGPU*", "device/cublas.TestGPU*", "device/cudatensor.TestGPU*", "distributed/backend/nccl.TestGPU*"},
			find: func(context.Context) (string, error) {
				d, err := cuda.Load()
				if err != nil {
					return "", err
				}
				if err := d.Init(); err != nil {
					return "", err
				}
				n, err := d.DeviceCount()
				if err == nil && n == 0 {
					err = errors.New("the driver sees no device")
				}
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%d device(s)", n), nil
			},
		},
		{
			Name: "NVRTC", Use: "compiling the CUDA kernels at run time", Install: "Debian's libnvrtc12 (non-free), or pip's nvidia-cuda-nvrtc-cu12",
			Tests: []string{"device/nvrtc.TestCompileTargets", "device/nvrtc.TestCompileCUBIN", "device/nvrtc.TestCompileWithHeader",
				"device/nvrtc.TestCompileErrorHasLog", "device/nvrtc.TestBadOptions", "device/nvrtc.TestCacheHitAndCorruption", "device/nvrtc.TestConcurrentCompiles"},
			find: func(context.Context) (string, error) {
				l, err := nvrtc.Load()
				if err != nil {
					return "", err
				}
				return l.Path, nil
			},
		},
		{
			Name: "cuBLAS", Use: "GEMMs on the GPU", Install: "Debian's libcublas12 (non-free), or pip's nvidia-cublas-cu12",
			Tests: []string{"device/cublas.TestLoadAndBind"},
			find: func(context.Context) (string, error) {
				l, err := cublas.Load()
				if err != nil {
					return "", err
				}
				return l.Path, nil
			},
		},
	}
}

// Gates returns the groups of long tests that run only when asked.
func Gates() []Gate {
	return []Gate{
		{"COHORT_SOAK=1", "the kill -9 soak and the elastic MNIST on two hosts", []string{"tests/fault.TestKillRandomRank", "tests/multihost.TestMultiHost/elastic-mnist"}},
		{"COHORT_CLUSTER_TESTS=1", "Slurm in network namespaces (as root)", []string{"tests/cluster.TestSlurm"}},
		{"COHORT_LONG_TESTS=1", "MNIST's CNN against PyTorch, the run page of a real job", []string{"examples/mnist.TestPyTorchLoadsWeights", "examples/mnist.TestRunPageInChromium"}},
		{"COHORT_ANCHORS=DIR", "GPT-mini's loss curve against PyTorch's, from the anchors directory", []string{"examples/gpt.TestPyTorchCurve"}},
		{"COHORT_IMAGE=FILE", "an image built by cmd/cohort-image, unpacked and run", []string{"cmd/cohort-image.TestImage"}},
	}
}

// Find looks for every extra, each within a bound.
func Find(ctx context.Context) []Status {
	var out []Status
	for _, e := range List() {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		where, err := e.find(c)
		cancel()
		out = append(out, Status{Extra: e, Where: where, Err: err})
	}
	return out
}

// library finds the first of names that the dynamic loader loads (or the
// one the variable env names, as the package using it would).
func library(env string, names ...string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		if v := os.Getenv(env); env != "" && v != "" {
			names = []string{v}
		}
		var missing, errs []string
		for _, n := range names {
			h, err := purego.Dlopen(n, purego.RTLD_LAZY|purego.RTLD_LOCAL)
			switch {
			case err == nil:
				purego.Dlclose(h)
				return n, nil
			case strings.Contains(err.Error(), "cannot open shared object file"):
				missing = append(missing, n)
			default:
				errs = append(errs, err.Error())
			}
		}
		if len(missing) > 0 {
			errs = append(errs, strings.Join(missing, ", ")+": not found by the dynamic loader")
		}
		return "", errors.New(strings.Join(errs, "; "))
	}
}

// program finds every one of names in PATH.
func program(names ...string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		var where []string
		for _, n := range names {
			p, err := exec.LookPath(n)
			if err != nil {
				return "", fmt.Errorf("%s not in PATH", n)
			}
			where = append(where, p)
		}
		return strings.Join(where, " "), nil
	}
}

// anyProgram finds the first of names in PATH.
func anyProgram(names ...string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p, nil
			}
		}
		return "", fmt.Errorf("none of %s in PATH", strings.Join(names, ", "))
	}
}

// rootWith needs root and the programs names.
func rootWith(names ...string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if uid := os.Geteuid(); uid != 0 {
			return "", fmt.Errorf("running as uid %d, not root", uid)
		}
		return program(names...)(ctx)
	}
}

// python runs code in the interpreter py.
func python(py, code string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		out, err := exec.CommandContext(ctx, py, "-c", code).CombinedOutput()
		if err != nil {
			msg := strings.TrimSpace(string(out))
			if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
				msg = msg[i+1:] // the exception's line
			}
			if msg == "" {
				msg = err.Error()
			}
			return "", fmt.Errorf("%s -c '%s': %s", py, code, msg)
		}
		return py, nil
	}
}
