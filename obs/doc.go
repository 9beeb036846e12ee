// Package obs lets a training loop be watched while it runs: a progress
// bar on rank 0, a live run page with Prometheus metrics (package
// dashboard), and per-rank Chrome-trace timelines (package trace).
//
// A program calls Start once with FromEnv's options, takes the Tracer for
// its spans, and calls Run.Step after every step:
//
//	run, err := obs.Start(ctx, obs.FromEnv(os.Getenv, obs.Options{TotalSteps: n}))
//	defer run.Close()
//	tr := run.Tracer() // nil-safe: spans cost nothing when tracing is off
//	for … {
//		sp := tr.Begin(trace.Data, "batch"); x, y := next(); sp.End()
//		…
//		run.Step(obs.Step{Step: i, Epoch: e, Loss: loss, Samples: b, Duration: d, Compute: c, Comm: x, DataWait: w})
//	}
//
// The environment (read only by FromEnv): COHORT_DASHBOARD=host:port
// serves the page from rank 0 (other ranks post their steps to it),
// COHORT_TRACE=DIR writes DIR/rank-N.json, COHORT_PROGRESS=off silences
// the bar.
package obs
