package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
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
	TraceDir   string // empty: no trace
	Restarts   int    // restarts so far (shown on the page)
	// Progress receives rank 0's progress display (default stdout);
	// NoProgress turns it off.
	Progress   io.Writer
	NoProgress bool
}

// FromEnv returns o completed from the environment: RANK, WORLD_SIZE,
// MASTER_ADDR, COHORT_TOKEN, TORCHELASTIC_RESTART_COUNT, COHORT_DASHBOARD,
// COHORT_TRACE and COHORT_PROGRESS=off. Fields already set win.
func FromEnv(getenv func(string) string, o Options) Options {
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
	if v := getenv("COHORT_PROGRESS"); v == "off" || v == "0" {
		o.NoProgress = true
	}
	return o
}

// Step is one training step as a rank saw it.
type Step struct {
	Step, Epoch int
	Loss        float64
	Samples     int           // samples this step on this rank
	Duration    time.Duration // the whole step
	Compute     time.Duration // forward + backward + optimizer, minus exposed comm
	Comm        time.Duration // communication not hidden behind compute (ddp.Stats.Exposed)
	DataWait    time.Duration // waiting for the batch
	Bytes       int64         // bytes all-reduced
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
		if o.Rank == 0 {
			r.hub = dashboard.NewHub(o.Name, o.WorldSize, o.Token)
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
			r.client = dashboard.NewClient(net.JoinHostPort(host, port), o.Token)
		}
	}
	if o.Rank == 0 && !o.NoProgress {
		r.bar = progress.New(progress.Options{Total: o.TotalSteps, Out: o.Progress})
	}
	return r, nil
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
	rep := dashboard.Report{Rank: r.o.Rank, Step: s.Step, Epoch: s.Epoch, Loss: s.Loss, Samples: s.Samples,
		Seconds: s.Duration.Seconds(), Compute: s.Compute.Seconds(), Comm: s.Comm.Seconds(), DataWait: s.DataWait.Seconds(), Bytes: s.Bytes}
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
		r.bar.Update(progress.Status{Step: s.Step, Epoch: s.Epoch, Loss: s.Loss, SamplesPerSec: tput})
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
