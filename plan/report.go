package plan

import (
	"fmt"
	"math"
	"strings"
)

// Line is the prediction as `cohort plan` prints it, one line that
// scripts can read:
//
//	plan: dp D pp P tp T shard S microbatches M schedule X tokens/s Y memory/rank Z
//
// with Z in MiB and X as Layout.ScheduleName.
func (p *Prediction) Line() string {
	return fmt.Sprintf("plan: dp %d pp %d tp %d shard %s microbatches %d schedule %s tokens/s %.1f memory/rank %.1f",
		p.DP, p.PP, p.TP, p.Shard, p.Microbatches, p.ScheduleName(), p.TokensPerSec, float64(p.Memory.Total)/(1<<20))
}

// Limit names what costs the layout most besides its compute: "bubble",
// "exposed all-reduce" (data-parallel communication), "tensor-parallel
// all-reduce", "pipeline p2p" or "optimizer", with its share of the step.
func (p *Prediction) Limit() (what string, share float64) {
	t := p.Times
	cands := []struct {
		name string
		v    float64
	}{{"bubble", t.Bubble}, {"exposed all-reduce", t.DP}, {"tensor-parallel all-reduce", t.TP}, {"pipeline p2p", t.PP}, {"optimizer", t.Optimizer}}
	best := cands[0]
	for _, c := range cands[1:] {
		if c.v > best.v {
			best = c
		}
	}
	return best.name, best.v / t.Step
}

// Explain is the breakdown of a prediction, several lines.
func (p *Prediction) Explain(e *Env) string {
	var b strings.Builder
	t := p.Times
	ms := func(s float64) string { return fmt.Sprintf("%.3g ms", s*1e3) }
	pct := func(s float64) string { return fmt.Sprintf("%.1f%%", 100*s/t.Step) }
	unit := "sequences"
	if e.Model.Kind == "mlp" {
		unit = "samples"
	}
	fmt.Fprintf(&b, "explain: %v: microbatches of %d %s, %d ranks on %d nodes\n", p.Layout, p.MicroBatch, unit, e.Cluster.Ranks(), e.Cluster.Nodes)
	fmt.Fprintf(&b, "  step            %s\n", ms(t.Step))
	fmt.Fprintf(&b, "  compute         %s (%s) the busiest rank's forward and backward passes\n", ms(t.Compute), pct(t.Compute))
	fmt.Fprintf(&b, "  tensor-parallel %s (%s) all-reduces on the critical path\n", ms(t.TP), pct(t.TP))
	fmt.Fprintf(&b, "  bubble          %s (%s) pipeline fill and drain\n", ms(t.Bubble), pct(t.Bubble))
	fmt.Fprintf(&b, "  pipeline p2p    %s (%s) activations and gradients between stages\n", ms(t.PP), pct(t.PP))
	fmt.Fprintf(&b, "  data-parallel   %s (%s) exposed, of %s in all\n", ms(t.DP), pct(t.DP), ms(t.DPTotal))
	fmt.Fprintf(&b, "  optimizer       %s (%s)\n", ms(t.Optimizer), pct(t.Optimizer))
	peak, _ := e.Device.Peak(e.Model.precision().dtype)
	fmt.Fprintf(&b, "  tokens/s %.1f, %.3g FLOP/s per rank (%.1f%% of %s peak)\n", p.TokensPerSec, p.FLOPsPerRank, 100*p.FLOPsPerRank/peak, e.Model.precision().dtype)
	m := p.Memory
	fmt.Fprintf(&b, "  memory/rank %.1f MiB of %.1f: parameters %.1f, gradients %.1f, optimizer %.1f, activations %.1f, buffers %.1f\n",
		mb(m.Total), mb(e.memLimit()), mb(m.Params), mb(m.Grads), mb(m.Optimizer), mb(m.Activations), mb(m.Buffers))
	what, share := p.Limit()
	fmt.Fprintf(&b, "  limit: %s, %.1f%% of the step\n", what, 100*share)
	return b.String()
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// Runnable reports whether a cohort program runs l: examples/gpt (under
// `cohort run`) any unsharded GPT layout, `cohort bench train --shard`
// sharded data parallelism of GPT-mini or the MLP on one host.
func Runnable(e *Env, l Layout) bool {
	if e.Model.Kind == "mlp" || l.Shard != "none" {
		return e.Cluster.Nodes == 1
	}
	return true
}

// RunLine returns the command that runs l (see Runnable), as the last
// line of `cohort plan`. Only GPT-mini and the MLP have programs; for
// other models the flags say how to lay out a program of one's own.
func RunLine(e *Env, l Layout) string {
	c, m := e.Cluster, e.Model
	if m.Kind == "mlp" || l.Shard != "none" {
		model := "gpt"
		if m.Kind == "mlp" {
			model = "mlp"
		}
		s := fmt.Sprintf("run: cohort bench train --model %s --world %d", model, c.Ranks())
		if l.Shard != "none" {
			s += " --shard " + l.Shard
		}
		return s
	}
	s := fmt.Sprintf("run: cohort run --nnodes %d --nproc-per-node %d ./examples/gpt -dp %d -pp %d -tp %d -batch %d -microbatches %d",
		c.Nodes, c.ProcsPerNode, l.DP, l.PP, l.TP, m.GlobalBatch/l.DP, l.Microbatches)
	if l.PP > 1 {
		s += " -schedule " + l.Schedule
		if l.Schedule == "interleaved" {
			s += fmt.Sprintf(" -virtual %d", l.Virtual)
		}
	}
	if m.Recompute {
		s += " -recompute"
	}
	if m.Name != "gpt" {
		s += fmt.Sprintf("  # examples/gpt trains GPT-mini; %s needs its own program with this layout", m.Name)
	}
	return s
}

// Choose returns the line that ends `cohort plan`: the fastest layout a
// cohort program runs, as its command (preceded by a note when a faster
// layout has no program yet).
func Choose(e *Env, ps []Prediction) string {
	for i := range ps {
		if Runnable(e, ps[i].Layout) {
			if i == 0 {
				return RunLine(e, ps[i].Layout)
			}
			return fmt.Sprintf("note: the fastest layout (%v) has no cohort program across %d nodes; the fastest that has one:\n%s",
				ps[0].Layout, e.Cluster.Nodes, RunLine(e, ps[i].Layout))
		}
	}
	return fmt.Sprintf("run: no cohort program runs these layouts across %d nodes yet (sharded or mlp data parallelism runs on one host: cohort bench train)", e.Cluster.Nodes)
}

// ScalePoint is the best layout at one node count, or why there is none.
type ScalePoint struct {
	Nodes int
	Best  *Prediction
	Err   error
}

// Sweep finds the best layout of e's model at each node count (e.Cluster's
// Nodes is ignored).
func Sweep(e *Env, nodes []int) []ScalePoint {
	out := make([]ScalePoint, len(nodes))
	for i, n := range nodes {
		env := *e
		env.Cluster.Nodes = n
		out[i].Nodes = n
		ps, err := Search(&env)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Best = &ps[0]
	}
	return out
}

// Family is a layout shape followed across node counts: its TP, PP,
// shard and schedule stay, DP grows with the nodes and the microbatches
// are the best for each.
type Family struct {
	TP, PP   int
	Shard    string
	Schedule string // Layout.ScheduleName
	// From is the first node count it fits at; Last the last at which its
	// tokens/s per rank is still at least 80% of From's (weak scaling
	// efficiency); Stop the next node count (0: it scales over the whole
	// range), and Reason why it stops there.
	From, Last, Stop int
	Efficiency       float64 // at Last
	Reason           string
}

func (f Family) String() string {
	s := fmt.Sprintf("scale: tp %d pp %d shard %s schedule %s: from %d nodes", f.TP, f.PP, f.Shard, f.Schedule, f.From)
	if f.Stop == 0 {
		return s + fmt.Sprintf(" scales to %d (efficiency %.0f%%)", f.Last, 100*f.Efficiency)
	}
	return s + fmt.Sprintf(" scales to %d (efficiency %.0f%%), stops at %d: %s", f.Last, 100*f.Efficiency, f.Stop, f.Reason)
}

// Families reports, for every layout shape that fits at some node count
// in nodes (ascending), how far it scales and why it stops: a growing
// bubble (fewer microbatches per replica as DP grows), exposed all-reduce,
// memory, or a global batch too small for more replicas.
func Families(e *Env, nodes []int) []Family {
	type key struct {
		tp, pp      int
		shard, schd string
	}
	type state struct {
		best  *Prediction
		exist bool // some layout of the family exists (fitting or not)
	}
	per := make([]map[key]*state, len(nodes))
	var order []key
	seen := map[key]bool{}
	for i, n := range nodes {
		env := *e
		env.Cluster.Nodes = n
		per[i] = map[key]*state{}
		if env.validate() != nil {
			continue
		}
		for _, l := range env.Layouts() {
			k := key{l.TP, l.PP, l.Shard, l.ScheduleName()}
			s := per[i][k]
			if s == nil {
				s = &state{}
				per[i][k] = s
			}
			s.exist = true
			p := env.predict(l)
			if p.Fits && (s.best == nil || p.TokensPerSec > s.best.TokensPerSec) {
				s.best = &p
			}
			if !seen[k] {
				seen[k] = true
				order = append(order, k)
			}
		}
	}
	var out []Family
	for _, k := range order {
		f := Family{TP: k.tp, PP: k.pp, Shard: k.shard, Schedule: k.schd}
		first := -1
		for i := range nodes {
			if s := per[i][k]; s != nil && s.best != nil {
				first = i
				break
			}
		}
		if first < 0 {
			continue
		}
		base := per[first][k].best
		perRank := func(p *Prediction, n int) float64 { return p.TokensPerSec / float64(n) }
		f.From, f.Last, f.Efficiency = nodes[first], nodes[first], 1
		for i := first + 1; i < len(nodes); i++ {
			s := per[i][k]
			switch {
			case s == nil || !s.exist:
				f.Stop, f.Reason = nodes[i], "no layout: the global batch has too few sequences for dp·microbatch (or the stages for the layers)"
			case s.best == nil:
				f.Stop, f.Reason = nodes[i], "memory"
			default:
				eff := perRank(s.best, nodes[i]) / perRank(base, nodes[first])
				if eff < 0.8 {
					f.Stop, f.Reason = nodes[i], fmt.Sprintf("efficiency %.0f%%: %s", 100*eff, grew(base, s.best))
				} else {
					f.Last, f.Efficiency = nodes[i], eff
				}
			}
			if f.Stop != 0 {
				break
			}
		}
		out = append(out, f)
	}
	return out
}

// grew names the cost whose share of the step grew most from a to b.
func grew(a, b *Prediction) string {
	share := func(p *Prediction) []float64 {
		t := p.Times
		return []float64{t.Bubble / t.Step, t.DP / t.Step, t.TP / t.Step, t.PP / t.Step, t.Optimizer / t.Step}
	}
	names := []string{"bubble", "exposed all-reduce", "tensor-parallel all-reduce", "pipeline p2p", "optimizer"}
	sa, sb := share(a), share(b)
	best, d := 0, math.Inf(-1)
	for i := range sa {
		if sb[i]-sa[i] > d {
			best, d = i, sb[i]-sa[i]
		}
	}
	return fmt.Sprintf("%s %.0f%% of the step (was %.0f%%)", names[best], 100*sb[best], 100*sa[best])
}
