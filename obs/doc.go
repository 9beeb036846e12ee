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
//	out := run.Out()   // the program's lines: the bar cleared around them, rank-prefixed under mpirun/srun
//	for … {
//		sp := tr.Begin(trace.Data, "batch"); x, y := next(); sp.End()
//		…
//		run.Step(obs.Step{Step: i, Epoch: e, Loss: loss, Samples: b, Duration: d, Compute: c, Comm: x, DataWait: w})
//	}
//
// The environment (read only by FromEnv): COHORT_DASHBOARD=host:port
// serves the page from rank 0 (other ranks post their steps to it),
// COHORT_TRACE=DIR writes DIR/rank-N.json, COHORT_PROGRESS=off silences
// the bar (bar or lines force one form). Under mpirun or srun with more
// than one rank, lines are prefixed "[rank N] " and progress is printed as
// plain lines (see FromEnv).
//
// The run page keeps bounded state (package dashboard): reports only of
// the world's ranks, with COHORT_TOKEN or, without it, a secret derived
// from Options.Job (distributed.JobID), so only the job's processes post.
package obs
