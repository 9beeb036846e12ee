package collbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/device/nccl"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native, MPI and NCCL backends
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/launch"
)

// Ops lists the collectives the benchmark measures.
var Ops = []string{"allreduce", "broadcast", "allgather", "reducescatter"}

var opKinds = map[string]collective.Kind{"allreduce": collective.AllReduce, "broadcast": collective.Broadcast,
	"allgather": collective.AllGather, "reducescatter": collective.ReduceScatter}

// DefaultSizes are the anchor's message sizes: 4 KiB to 64 MiB.
var DefaultSizes = []int64{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

// Config is one benchmark run.
type Config struct {
	Op        string // one of Ops
	World     int    // processes to spawn
	Transport string // "auto", "tcp", "shm"
	// Backend is "native" (or "") or "mpi": the MPI library's collectives,
	// with the workers started by mpirun instead of this package; or
	// "nccl": NCCL on one GPU per worker, its host buffers staged through
	// device memory (so the figures include the copies in and out).
	Backend string
	Sizes   []int64       // message sizes in bytes (all-gather: the gathered output)
	Budget  time.Duration // target duration of the timed loop per size
	Repeats int           // fresh process groups, one after the other
	Timeout time.Duration // bound on the whole run
	Profile string        // CPU profile path prefix ("" for none)
	// Threads is each worker's GOMAXPROCS, passed as COHORT_NUM_THREADS
	// like a launcher does; 0 means the cores divided among the workers
	// (at least 1), as torchrun gives each worker one OpenMP thread.
	Threads int
	// SegmentBytes and Algo override the automatic choices (for tuning).
	SegmentBytes int64
	InlineBytes  int64
	Algo         string
}

// Result is one size's measurement, as rank 0 reports it.
type Result struct {
	Op        string  `json:"op"`
	Bytes     int64   `json:"bytes"`
	World     int     `json:"world"`
	Transport string  `json:"transport"`
	Iters     int     `json:"iters"`
	Warmup    int     `json:"warmup"`
	TimeS     float64 `json:"time_s"` // median over iterations of the max over ranks
	MeanS     float64 `json:"mean_s"`
	MinS      float64 `json:"min_s"`
	MaxS      float64 `json:"max_s"`
	FirstS    float64 `json:"first_s"` // the first op on fresh buffers (max over ranks)
	AlgBW     float64 `json:"algbw_GBps"`
	BusBW     float64 `json:"busbw_GBps"`
	OK        bool    `json:"ok"`
}

// busFactor converts algorithm bandwidth to bus bandwidth (nccl-tests).
func busFactor(op string, n int) float64 {
	switch op {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "allgather", "reducescatter":
		return float64(n-1) / float64(n)
	}
	return 1
}

// Main runs `cohort bench <op>`: parses args, then either spawns the
// workers and prints the table (the parent) or, with --worker, measures as
// one rank. self is the command line that re-runs this subcommand (the
// executable and the words before the flags). It returns the exit code.
func Main(op string, self []string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cohort bench "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	world := fs.Int("world", 2, "number of local processes")
	transport := fs.String("transport", "auto", "transport: tcp, shm or auto")
	backend := fs.String("backend", "native", "native (cohort's collectives), mpi (the MPI library's, workers started by mpirun; MPIRUN overrides the command) or nccl (NCCL, one GPU per worker)")
	sizes := fs.String("sizes", "4KiB,64KiB,1MiB,16MiB,64MiB", "comma-separated message sizes")
	budget := fs.Duration("budget", time.Second, "target duration of the timed loop per size")
	repeats := fs.Int("repeats", 1, "fresh process groups, one after the other (all rows are printed)")
	jsonOut := fs.String("json", "", "also append the results as JSON lines to this file")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on the whole run")
	segment := fs.String("segment", "0", "pipeline segment size (0: automatic; see collective.Tuning)")
	inline := fs.String("inline", "0", "largest payload run inline (0: automatic; see collective.Tuning)")
	algo := fs.String("algo", "", "force this algorithm (see collective.Algorithms; default: automatic)")
	threads := fs.Int("threads", 0, "Go threads per worker (GOMAXPROCS; 0: the cores divided among the workers, at least 1)")
	profile := fs.String("cpuprofile", "", "write each rank's CPU profile to this path with the rank appended")
	worker := fs.Bool("worker", false, "internal: run as one rank (set by the parent)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cohort bench %s: unexpected argument %q\n", op, fs.Arg(0))
		return 2
	}
	cfg := Config{Op: op, World: *world, Transport: *transport, Backend: *backend, Budget: *budget, Repeats: *repeats, Timeout: *timeout, Profile: *profile, Threads: *threads, Algo: *algo}
	var err error
	for _, f := range []struct {
		name, value string
		to          *int64
	}{{"segment", *segment, &cfg.SegmentBytes}, {"inline", *inline, &cfg.InlineBytes}} {
		if f.value == "0" { // the default
			continue
		}
		n, err := ParseSizes(f.value)
		if err != nil || len(n) != 1 {
			fmt.Fprintf(stderr, "cohort bench %s: bad --%s %q\n", op, f.name, f.value)
			return 2
		}
		*f.to = n[0]
	}
	if cfg.Sizes, err = ParseSizes(*sizes); err != nil {
		fmt.Fprintf(stderr, "cohort bench %s: %v\n", op, err)
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "cohort bench %s: %v\n", op, err)
		return 2
	}
	if *worker {
		if cfg.Profile != "" {
			stop, err := startProfile(cfg.Profile)
			if err != nil {
				fmt.Fprintf(stderr, "cohort bench %s: %v\n", op, err)
				return 1
			}
			defer stop()
		}
		if err := Worker(context.Background(), cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "cohort bench %s: %v\n", op, err)
			return 1
		}
		return 0
	}
	var all []Result
	for rep := range cfg.Repeats {
		res, err := Spawn(context.Background(), cfg, self, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "cohort bench %s: %v\n", op, err)
			return 1
		}
		if cfg.Repeats > 1 {
			fmt.Fprintf(stdout, "# repeat %d\n", rep+1)
		}
		PrintTable(stdout, cfg, res)
		all = append(all, res...)
	}
	if *jsonOut != "" {
		if err := AppendJSON(*jsonOut, all); err != nil {
			fmt.Fprintf(stderr, "cohort bench %s: %v\n", op, err)
			return 1
		}
	}
	fmt.Fprintln(stdout, Summary(cfg, all))
	for _, r := range all {
		if !r.OK {
			fmt.Fprintf(stderr, "cohort bench %s: result check FAILED at %d bytes (world %d, %s): the collective computed a wrong answer\n", op, r.Bytes, r.World, r.Transport)
			return 1
		}
	}
	return 0
}

func (c Config) validate() error {
	if !slices.Contains(Ops, c.Op) {
		return fmt.Errorf("unknown collective %q (want one of %v)", c.Op, Ops)
	}
	switch {
	case c.World < 1:
		return fmt.Errorf("--world %d < 1", c.World)
	case c.World > 64:
		return fmt.Errorf("--world %d: at most 64 local processes", c.World)
	case c.Budget <= 0:
		return fmt.Errorf("--budget %v must be positive", c.Budget)
	case c.Repeats < 1:
		return fmt.Errorf("--repeats %d < 1", c.Repeats)
	case c.Threads < 0:
		return fmt.Errorf("--threads %d < 0", c.Threads)
	case len(c.Sizes) == 0:
		return errors.New("no sizes")
	}
	switch c.Backend {
	case "", "native":
	case "mpi", "nccl":
		if c.Algo != "" || c.SegmentBytes != 0 || c.InlineBytes != 0 {
			return fmt.Errorf("--backend %s: --algo, --segment and --inline tune cohort's own collectives; %s chooses its own", c.Backend, strings.ToUpper(c.Backend))
		}
	default:
		return fmt.Errorf("--backend %q: want native, mpi or nccl", c.Backend)
	}
	switch c.Transport {
	case "auto", "tcp", "shm":
	default:
		return fmt.Errorf("--transport %q: want tcp, shm or auto", c.Transport)
	}
	return nil
}

// ParseSizes parses "4KiB,1MiB,16MiB,100" (suffixes KiB, MiB, GiB, K, M, G
// are powers of two; no suffix means bytes).
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := int64(1)
		for _, u := range []struct {
			suffix string
			m      int64
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
			if num, ok := strings.CutSuffix(f, u.suffix); ok {
				f, mult = num, u.m
				break
			}
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= 0 || n > (1<<40)/mult {
			return nil, fmt.Errorf("bad size %q", f)
		}
		if n*mult%4 != 0 {
			return nil, fmt.Errorf("size %d is not a whole number of float32s", n*mult)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	return out, nil
}

// FormatSize renders a byte count the way the table and summary do.
func FormatSize(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

func (c Config) flags() []string {
	sizes := make([]string, len(c.Sizes))
	for i, s := range c.Sizes {
		sizes[i] = strconv.FormatInt(s, 10)
	}
	return []string{"--world", strconv.Itoa(c.World), "--transport", c.Transport, "--backend", c.Backend,
		"--sizes", strings.Join(sizes, ","), "--budget", c.Budget.String(), "--timeout", c.Timeout.String(),
		"--cpuprofile", c.Profile, "--threads", strconv.Itoa(c.Threads),
		"--segment", strconv.FormatInt(c.SegmentBytes, 10), "--inline", strconv.FormatInt(c.InlineBytes, 10), "--algo", c.Algo, "--worker"}
}

// Spawn starts cfg.World workers (self plus the worker flags) on this
// host through the launcher of `cohort run` (package launch), which gives
// them torchrun's environment and COHORT_NUM_THREADS, waits for them and
// returns rank 0's results; a failing worker stops the others and its
// report goes to stderr. With Backend "mpi", mpirun starts them instead.
func Spawn(ctx context.Context, cfg Config, self []string, stderr io.Writer) ([]Result, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.Backend == "mpi" {
		return spawnMPI(ctx, cfg, self, stderr)
	}
	if cfg.Backend == "nccl" {
		// Fail here, in one line, rather than in every worker.
		if _, err := nccl.Load(); err != nil {
			return nil, fmt.Errorf("--backend nccl: %w", err)
		}
	}
	pr, pw := io.Pipe()
	results := make(chan []Result, 1)
	perr := make(chan error, 1)
	go func() {
		res, err := readResults(pr)
		io.Copy(io.Discard, pr) // keep draining after a bad line
		results <- res
		perr <- err
	}()
	err := launch.Run(ctx, launch.Config{
		NProcPerNode: cfg.World,
		NumCPU:       cfg.threads() * cfg.World, // each worker: COHORT_NUM_THREADS = threads
		Program:      self[0],
		Args:         append(slices.Clone(self[1:]), cfg.flags()...),
		Env:          os.Environ(),
		Stdout:       pw,
		Stderr:       stderr,
	})
	pw.Close()
	res, rerr := <-results, <-perr
	var we *launch.WorkerError
	if errors.As(err, &we) {
		return nil, errors.New(we.Report())
	}
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if len(res) != len(cfg.Sizes) {
		return nil, fmt.Errorf("rank 0 reported %d results for %d sizes", len(res), len(cfg.Sizes))
	}
	return res, nil
}

// label names what carried the collectives: the transport, or "mpi".
func (c Config) label() string {
	if c.Backend == "mpi" {
		return "mpi"
	}
	return c.Transport
}

// spawnMPI starts the workers with mpirun (the MPIRUN environment
// variable, else mpirun on PATH): MPI's launcher places them and MPI
// tells each its rank. Open MPI's own settings come from the environment
// as usual (OMPI_MCA_btl=self,vader …). Rank 0's result lines come back on mpirun's
// standard output.
func spawnMPI(ctx context.Context, cfg Config, self []string, stderr io.Writer) ([]Result, error) {
	mpirun := os.Getenv("MPIRUN")
	if mpirun == "" {
		var err error
		if mpirun, err = exec.LookPath("mpirun"); err != nil {
			return nil, fmt.Errorf("--backend mpi: no mpirun on PATH (set MPIRUN): %w", err)
		}
	}
	// Unbound, as bench/vs_mpi.sh runs MPI's own benchmark: a bound rank
	// would share its one core with the Go runtime's other threads.
	args := []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(cfg.World)}
	args = append(append(args, self...), cfg.flags()...)
	cmd := exec.CommandContext(ctx, mpirun, args...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", mpirun, err)
	}
	res, perr := readResults(stdout)
	if err := cmd.Wait(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n%s", mpirun, err, errBuf.String())
		return nil, fmt.Errorf("%s: %w", mpirun, err)
	}
	if perr != nil {
		return nil, perr
	}
	if len(res) != len(cfg.Sizes) {
		return nil, fmt.Errorf("rank 0 reported %d results for %d sizes", len(res), len(cfg.Sizes))
	}
	return res, nil
}

const resultPrefix = "result "

func readResults(r io.Reader) ([]Result, error) {
	var res []Result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// Rank 0's lines, with the launcher's "[rank 0] " prefix or, under
		// mpirun, without one.
		line, ok := strings.CutPrefix(strings.TrimPrefix(sc.Text(), "[rank 0] "), resultPrefix)
		if !ok {
			continue
		}
		var x Result
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			return nil, fmt.Errorf("bad result line %q: %w", line, err)
		}
		res = append(res, x)
	}
	return res, sc.Err()
}

func (c Config) threads() int {
	if c.Threads > 0 {
		return c.Threads
	}
	return max(1, runtime.NumCPU()/c.World)
}

// Worker measures as one rank of a job described by the environment
// (torchrun's contract) and, on rank 0, writes one "result {json}" line
// per size to w.
func Worker(ctx context.Context, cfg Config, w io.Writer) error {
	if cfg.Backend == "mpi" {
		runtime.GOMAXPROCS(cfg.threads())
		pg, err := distributed.Init(ctx, distributed.Options{Backend: "mpi"})
		if err != nil {
			return err
		}
		return work(ctx, pg, cfg, w)
	}
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if info.NumThreads > 0 {
		runtime.GOMAXPROCS(info.NumThreads)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	gopts := distributed.GroupOptions{Timeout: 2 * time.Minute, Tuning: collective.Tuning{SegmentBytes: cfg.SegmentBytes, InlineBytes: cfg.InlineBytes}}
	if cfg.Algo != "" {
		gopts.Algorithms = map[collective.Kind]string{opKinds[cfg.Op]: cfg.Algo}
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{Backend: cfg.Backend, Transport: cfg.Transport, Group: gopts})
	if err != nil {
		return err
	}
	return work(ctx, pg, cfg, w)
}

// work measures every size on pg and closes it.
func work(ctx context.Context, pg distributed.ProcessGroup, cfg Config, w io.Writer) error {
	defer pg.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for _, size := range cfg.Sizes {
		res, err := measure(ctx, pg, cfg, size)
		if err != nil {
			return fmt.Errorf("%s %s: %w", cfg.Op, FormatSize(size), err)
		}
		if pg.Rank() == 0 {
			b, _ := json.Marshal(res)
			fmt.Fprintf(w, "%s%s\n", resultPrefix, b)
		}
	}
	return pg.Barrier(ctx).Wait()
}

// measure follows the anchor's method: warm-up (20 iterations, 5 from
// 16 MiB), iterations chosen so the timed loop takes about cfg.Budget
// (from the warm-up mean, max over ranks, clamped to [10, 1000]), each
// iteration timed on its own, element-wise max over ranks, median.
func measure(ctx context.Context, pg distributed.ProcessGroup, cfg Config, size int64) (Result, error) {
	n := pg.Size()
	numel := int(size / 4)
	var fn func() error
	var check func() (bool, error)
	switch cfg.Op {
	case "allreduce":
		buf := make([]float32, numel)
		fn = func() error { return pg.AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait() }
		check = func() (bool, error) {
			c := make([]float32, numel)
			for i := range c {
				c[i] = 1
			}
			if err := pg.AllReduce(ctx, distributed.F32(c), distributed.Sum).Wait(); err != nil {
				return false, err
			}
			return allEqual(c, float32(n)), nil
		}
	case "broadcast":
		buf := make([]float32, numel)
		fn = func() error { return pg.Broadcast(ctx, distributed.F32(buf), 0).Wait() }
		check = func() (bool, error) {
			c := make([]float32, numel)
			for i := range c {
				c[i] = float32(pg.Rank())
			}
			if err := pg.Broadcast(ctx, distributed.F32(c), 0).Wait(); err != nil {
				return false, err
			}
			return allEqual(c, 0), nil
		}
	case "allgather":
		per := numel / n
		in, out := make([]float32, per), make([]float32, per*n)
		fn = func() error { return pg.AllGather(ctx, distributed.F32(out), distributed.F32(in)).Wait() }
		check = func() (bool, error) {
			for i := range in {
				in[i] = float32(pg.Rank())
			}
			if err := pg.AllGather(ctx, distributed.F32(out), distributed.F32(in)).Wait(); err != nil {
				return false, err
			}
			for r := range n {
				if !allEqual(out[r*per:(r+1)*per], float32(r)) {
					return false, nil
				}
			}
			return true, nil
		}
	case "reducescatter":
		per := numel / n
		in, out := make([]float32, per*n), make([]float32, per)
		fn = func() error {
			return pg.ReduceScatter(ctx, distributed.F32(out), distributed.F32(in), distributed.Sum).Wait()
		}
		check = func() (bool, error) {
			for i := range in {
				in[i] = 1
			}
			if err := pg.ReduceScatter(ctx, distributed.F32(out), distributed.F32(in), distributed.Sum).Wait(); err != nil {
				return false, err
			}
			return allEqual(out, float32(n)), nil
		}
	}
	warmup := 20
	if size >= 16<<20 {
		warmup = 5
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return Result{}, err
	}
	t0 := time.Now()
	var first float64 // the first op on fresh buffers: cold paths count too
	for i := range warmup {
		if err := fn(); err != nil {
			return Result{}, err
		}
		if i == 0 {
			first = time.Since(t0).Seconds()
		}
	}
	wm := []float64{time.Since(t0).Seconds() / float64(warmup), first}
	if err := pg.AllReduce(ctx, distributed.F64(wm), distributed.Max).Wait(); err != nil {
		return Result{}, err
	}
	iters := int(max(10, min(1000, math.Round(cfg.Budget.Seconds()/max(wm[0], 1e-9)))))
	ts := make([]float64, iters)
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return Result{}, err
	}
	for i := range ts {
		t := time.Now()
		if err := fn(); err != nil {
			return Result{}, err
		}
		ts[i] = time.Since(t).Seconds()
	}
	if err := pg.AllReduce(ctx, distributed.F64(ts), distributed.Max).Wait(); err != nil {
		return Result{}, err
	}
	ok, err := check()
	if err != nil {
		return Result{}, err
	}
	sorted := slices.Sorted(slices.Values(ts))
	med := median(sorted)
	sum := 0.0
	for _, t := range ts {
		sum += t
	}
	// All-gather and reduce-scatter move a whole number of chunks per
	// rank: the bandwidth counts the bytes actually moved.
	moved := size
	if cfg.Op == "allgather" || cfg.Op == "reducescatter" {
		moved = int64(numel/n*n) * 4
	}
	algbw := float64(moved) / med / 1e9
	return Result{
		Op: cfg.Op, Bytes: moved, World: n, Transport: cfg.label(), Iters: iters, Warmup: warmup,
		TimeS: med, MeanS: sum / float64(len(ts)), MinS: sorted[0], MaxS: sorted[len(sorted)-1], FirstS: wm[1],
		AlgBW: algbw, BusBW: algbw * busFactor(cfg.Op, n), OK: ok,
	}, nil
}

func median(sorted []float64) float64 {
	k := len(sorted)
	if k%2 == 1 {
		return sorted[k/2]
	}
	return (sorted[k/2-1] + sorted[k/2]) / 2
}

func allEqual(s []float32, v float32) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return true
}

// PrintTable writes the results in the style of nccl-tests.
func PrintTable(w io.Writer, cfg Config, res []Result) {
	fmt.Fprintf(w, "# cohort bench %s: world %d, transport %s, %d thread(s) per rank, float32", cfg.Op, cfg.World, cfg.label(), cfg.threads())
	if cfg.Op == "allreduce" || cfg.Op == "reducescatter" {
		fmt.Fprint(w, " sum")
	}
	fmt.Fprintf(w, ", busbw factor %.3g\n", busFactor(cfg.Op, cfg.World))
	fmt.Fprintf(w, "# %10s %10s %12s %12s %12s %12s %12s %6s %4s\n", "size", "count", "time(us)", "mean(us)", "first(us)", "algbw(GB/s)", "busbw(GB/s)", "iters", "ok")
	for _, r := range res {
		fmt.Fprintf(w, "  %10d %10d %12.1f %12.1f %12.1f %12.3f %12.3f %6d %4s\n",
			r.Bytes, r.Bytes/4, r.TimeS*1e6, r.MeanS*1e6, r.FirstS*1e6, r.AlgBW, r.BusBW, r.Iters, map[bool]string{true: "ok", false: "FAIL"}[r.OK])
	}
}

// Summary is the last line: the median over repeats of the 4 KiB time and
// the 16 MiB bus bandwidth (or of the smallest and largest sizes measured
// when those are absent).
func Summary(cfg Config, res []Result) string {
	small, large := cfg.Sizes[0], cfg.Sizes[len(cfg.Sizes)-1]
	if slices.Contains(cfg.Sizes, 4<<10) {
		small = 4 << 10
	}
	if slices.Contains(cfg.Sizes, 16<<20) {
		large = 16 << 20
	}
	var ts, bws []float64
	for _, r := range res {
		if r.Bytes == small {
			ts = append(ts, r.TimeS)
		}
		if r.Bytes == large {
			bws = append(bws, r.BusBW)
		}
	}
	slices.Sort(ts)
	slices.Sort(bws)
	return fmt.Sprintf("%s: world %d %s %.1f us, %s %.2f GB/s busbw",
		cfg.Op, cfg.World, FormatSize(small), median(ts)*1e6, FormatSize(large), median(bws))
}

// startProfile starts a CPU profile at prefix plus this rank (read from the
// environment through rendezvous, like the rest of the worker).
func startProfile(prefix string) (stop func(), err error) {
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, info.Rank))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// AppendJSON appends res to the file at path as JSON lines (what --json
// writes and ReadSaved reads), creating it if needed.
func AppendJSON(path string, res []Result) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range res {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// ReadSaved reads results saved by a run: the JSON lines of --json, or a
// worker's output, "result {json}" lines (with or without the launcher's
// "[rank 0] " prefix) among others, as rank 0 prints them when the
// workers are started by another launcher (cohort run across hosts).
// Other lines are skipped.
func ReadSaved(r io.Reader) ([]Result, error) {
	var res []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[rank ") {
			if i := strings.Index(line, "] "); i >= 0 {
				line = line[i+2:]
			}
		}
		line = strings.TrimPrefix(line, resultPrefix)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var x Result
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if x.Op == "" || x.World < 1 || x.Bytes <= 0 || !(x.TimeS > 0) {
			return nil, fmt.Errorf("line %d: not a benchmark result (want op, world, bytes and time_s): %s", n, line)
		}
		res = append(res, x)
	}
	return res, sc.Err()
}
