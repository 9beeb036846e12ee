package obs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/cohortml/cohort/obs/dashboard"
	"github.com/cohortml/cohort/obs/progress"
	"github.com/cohortml/cohort/obs/trace"
)

// Options configures Start; FromEnv fills it from the environment.
type Options struct {
	Name            string // shown on the page
	Rank, WorldSize int
	TotalSteps      int // for the progress bar's ETA; 0 if unknown
	// Dashboard is host:port: rank 0 serves the page there (":port"
	// listens on every interface) and the other ranks post to it (an
	// empty host means MasterAddr). Empty: no page.
	Dashboard  string
	MasterAddr string
	Token      string // guards the page's report endpoint
	// Job is the job's identity (distributed.JobID): without a Token,
	// the page accepts reports only with a secret derived from it, so only
	// the job's own processes can post. Empty with no Token: any process
	// that reaches the page may post reports for the world's ranks.
	Job      string
	TraceDir string // empty: no trace
	Restarts int    // restarts so far (shown on the page)
	// Progress receives rank 0's progress display (default stdout);
	// NoProgress turns it off. Run.Out writes there too.
	Progress   io.Writer
	NoProgress bool
	// Terminal forces the redrawn bar (true) or plain lines (false); nil
	// asks whether Progress is a terminal.
	Terminal *bool
	// Unit is what Step.Samples counts, shown per second ("tokens");
	// default "samples".
	Unit string
	// LinePrefix starts every line of Run.Out and of the progress display
	// ("[rank 1] "): FromEnv sets it for processes that mpirun or srun
	// started, whose lines nobody else prefixes.
	LinePrefix string
}

// FromEnv returns o completed from the environment: RANK, WORLD_SIZE,
// MASTER_ADDR, COHORT_TOKEN, TORCHELASTIC_RESTART_COUNT, COHORT_DASHBOARD,
// COHORT_TRACE and COHORT_PROGRESS (off, or bar / lines to force the
// redrawn bar or plain lines). Fields already set win; a nil getenv is
// an empty environment.
//
// A process started by mpirun or srun (OMPI_COMM_WORLD_RANK/SIZE,
// PMI_RANK/SIZE, SLURM_PROCID/SLURM_NTASKS, and no RANK: cohort run and
// torchrun set RANK and prefix their workers' lines themselves) in a
// world of more than one gets LinePrefix "[rank N] ", as cohort run's
// workers, and plain progress lines, even when mpirun gives it a
// terminal: a bar redrawn with carriage returns by several ranks on one
// stream, or in a log file, cannot be read. COHORT_PROGRESS=bar
// still forces the bar.
func FromEnv(getenv func(string) string, o Options) Options {
	if getenv == nil { // no environment
		getenv = func(string) string { return "" }
	}
	atoi := func(k string) int { n, _ := strconv.Atoi(getenv(k)); return n }
	if o.WorldSize == 0 {
		o.Rank, o.WorldSize = atoi("RANK"), max(atoi("WORLD_SIZE"), 1)
	}
	if o.MasterAddr == "" {
		o.MasterAddr = getenv("MASTER_ADDR")
	}
	if o.Token == "" {
		o.Token = getenv("COHORT_TOKEN")
	}
	if o.Restarts == 0 {
		o.Restarts = atoi("TORCHELASTIC_RESTART_COUNT")
	}
	if o.Dashboard == "" {
		o.Dashboard = getenv("COHORT_DASHBOARD")
	}
	if o.TraceDir == "" {
		o.TraceDir = getenv("COHORT_TRACE")
	}
	yes, no := true, false
	switch getenv("COHORT_PROGRESS") {
	case "off", "0":
		o.NoProgress = true
	case "bar":
		if o.Terminal == nil {
			o.Terminal = &yes
		}
	case "lines":
		if o.Terminal == nil {
			o.Terminal = &no
		}
	}
	if rank, world, ok := launchedBy(getenv); ok && world > 1 {
		if o.LinePrefix == "" {
			o.LinePrefix = "[rank " + strconv.Itoa(rank) + "] "
		}
		if o.Terminal == nil {
			o.Terminal = &no
		}
	}
	return o
}

// launchedBy returns the rank and world size that mpirun (Open MPI's or
// an MPICH/PMI one) or srun gave this process; ok is false when none did,
// or when RANK is set (cohort run, torchrun: their workers' output goes
// through the launcher, which prefixes it).
func launchedBy(getenv func(string) string) (rank, world int, ok bool) {
	if getenv("RANK") != "" {
		return 0, 0, false
	}
	for _, v := range [][2]string{{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}} {
		r, err1 := strconv.Atoi(getenv(v[0]))
		w, err2 := strconv.Atoi(getenv(v[1]))
		if err1 == nil && err2 == nil && r >= 0 && w >= 1 {
			return r, w, true
		}
	}
	return 0, 0, false
}

// Step is one training step as a rank saw it.
type Step struct {
	Step int // 0-based
	// Epoch counts from 1 (the first pass over the data is epoch 1); 0
	// means the run has no epochs, and the progress line shows none.
	Epoch    int
	Loss     float64
	Samples  int           // samples (or Options.Unit) this step on this rank
	Duration time.Duration // the whole step
	Compute  time.Duration // forward + backward + optimizer, minus exposed comm
	Comm     time.Duration // communication not hidden behind compute (ddp.Stats.Exposed)
	DataWait time.Duration // waiting for the batch
	Bytes    int64         // bytes all-reduced
}

// Run is a training run being watched. Its methods are safe for
// concurrent use; a nil *Run does nothing.
type Run struct {
	o      Options
	tracer *trace.Tracer
	hub    *dashboard.Hub
	srv    *dashboard.Server
	client *dashboard.Client
	bar    *progress.Bar
	out    io.Writer // Out
}

// Start opens what o asks for: the trace file, on rank 0 the page's
// server and the progress bar, on the others the page's client.
func Start(ctx context.Context, o Options) (*Run, error) {
	r := &Run{o: o}
	var err error
	if o.TraceDir != "" {
		if r.tracer, err = trace.Open(o.TraceDir, o.Rank); err != nil {
			return nil, fmt.Errorf("obs: %w", err)
		}
	}
	if o.Dashboard != "" {
		token := o.Token
		if token == "" && o.Job != "" {
			sum := sha256.Sum256([]byte("cohort-dashboard:" + o.Job))
			token = hex.EncodeToString(sum[:])
		}
		if o.Rank == 0 {
			r.hub = dashboard.NewHub(o.Name, o.WorldSize, token)
			r.hub.SetUnit(o.Unit)
			for range o.Restarts {
				r.hub.Restart()
			}
			if r.srv, err = dashboard.Serve(o.Dashboard, r.hub); err != nil {
				r.tracer.Close()
				return nil, fmt.Errorf("obs: rank 0: %w", err)
			}
			fmt.Fprintf(os.Stderr, "obs: run page at http://%s/\n", r.srv.Addr())
		} else {
			host, port, err := net.SplitHostPort(o.Dashboard)
			if err != nil {
				r.tracer.Close()
				return nil, fmt.Errorf("obs: COHORT_DASHBOARD %q: %w", o.Dashboard, err)
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = o.MasterAddr
			}
			r.client = dashboard.NewClient(net.JoinHostPort(host, port), token)
		}
	}
	r.out = o.Progress
	if r.out == nil {
		r.out = os.Stdout
	}
	if o.LinePrefix != "" {
		r.out = &prefixWriter{w: r.out, prefix: []byte(o.LinePrefix), start: true}
	}
	if o.Rank == 0 && !o.NoProgress {
		r.bar = progress.New(progress.Options{Total: o.TotalSteps, Out: r.out, Terminal: o.Terminal, Unit: o.Unit})
		r.out = r.bar
	}
	return r, nil
}

// Out is where the program prints its lines: Options.Progress (stdout by
// default), each line prefixed with Options.LinePrefix, and on rank 0
// through the progress bar, which is cleared before a line and drawn again
// after it. It is safe for concurrent use; a nil *Run's is stdout.
func (r *Run) Out() io.Writer {
	if r == nil {
		return os.Stdout
	}
	return r.out
}

// prefixWriter starts every line written to w with prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	start  bool // the next byte starts a line
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	p.buf = p.buf[:0]
	for len(b) > 0 {
		if p.start {
			p.buf = append(p.buf, p.prefix...)
			p.start = false
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.buf = append(p.buf, b...)
			break
		}
		p.buf = append(p.buf, b[:i+1]...)
		b = b[i+1:]
		p.start = true
	}
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return n, nil
}

// Tracer returns the rank's tracer (nil when tracing is off; a nil
// Tracer's spans cost one check).
func (r *Run) Tracer() *trace.Tracer {
	if r == nil {
		return nil
	}
	return r.tracer
}

// Step reports a finished step: to the page (and its metrics), the
// progress bar on rank 0, and the trace's step track. It never blocks on
// the network.
func (r *Run) Step(s Step) {
	if r == nil {
		return
	}
	rep := dashboard.Report{Rank: r.o.Rank, Step: s.Step, Epoch: s.Epoch, Loss: dashboard.Float(s.Loss), Samples: s.Samples,
		Seconds: dashboard.Float(s.Duration.Seconds()), Compute: dashboard.Float(s.Compute.Seconds()), Comm: dashboard.Float(s.Comm.Seconds()),
		DataWait: dashboard.Float(s.DataWait.Seconds()), Bytes: s.Bytes}
	switch {
	case r.hub != nil:
		r.hub.Record(rep)
	case r.client != nil:
		r.client.Record(rep)
	}
	if r.bar != nil {
		tput := 0.0
		if s.Duration > 0 {
			tput = float64(s.Samples*max(r.o.WorldSize, 1)) / s.Duration.Seconds()
		}
		r.bar.Update(progress.Status{Step: s.Step, Epoch: s.Epoch, Loss: s.Loss, Throughput: tput})
	}
}

// Note shows msg on the page (a watchdog report, a restart) and marks it
// in the trace.
func (r *Run) Note(msg string) {
	if r == nil {
		return
	}
	if r.hub != nil {
		r.hub.Note(msg)
	}
	r.tracer.Instant(trace.Step, msg)
}

// Addr is the page's address on rank 0 ("" elsewhere or when off).
func (r *Run) Addr() string {
	if r == nil || r.srv == nil {
		return ""
	}
	return r.srv.Addr()
}

// Close finishes the progress display, flushes the trace and stops the
// page's server or client.
func (r *Run) Close() error {
	if r == nil {
		return nil
	}
	if r.bar != nil {
		r.bar.Finish()
	}
	var errs []error
	errs = append(errs, r.tracer.Close())
	if r.client != nil {
		errs = append(errs, r.client.Close())
	}
	if r.srv != nil {
		errs = append(errs, r.srv.Close())
	}
	return errors.Join(errs...)
}
