package plan_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/cohortml/cohort/plan"
)

// TestTranscripts runs the text transcripts in testdata/transcripts
// (go test ./plan -rewrite rewrites them; review the diff). Commands:
//
//	model name=NAME | model (JSON input)       the accounting of a model
//	device name=NAME | device (JSON input)     a device's curve, or its error
//	fabric name=NAME | fabric (JSON input)     collective costs, or the error
//	plan model=NAME nodes=N procs=P [device=] [fabric=] [mem=MiB] [top=K] [explain=K]
//	scale model=NAME procs=P nodes=(N,…) [device=] [fabric=]
//	profile model=NAME microbatch=B (input: "rank name seconds" per span)
//	handoff (input: "rank track name start seconds" per span)
//	sidebyside (input: "p|a rank track name start seconds": pipelined or alone)
//	predict procs=P [cores=C] dp=D pp=P schedule=S microbatches=M [batch=B] (input: a device)
//
// A plan or scale whose input is not empty reads the model from it.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/transcripts", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := run(t, d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

func arg(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func env(t *testing.T, d *datadriven.TestData) (*plan.Env, error) {
	var m *plan.Model
	var err error
	if strings.TrimSpace(d.Input) != "" {
		m, err = plan.ParseModel([]byte(d.Input))
	} else {
		m, err = plan.NamedModel(arg(d, "model", "gpt"))
	}
	if err != nil {
		return nil, err
	}
	dev, err := plan.BuiltinDevice(arg(d, "device", "a100-80gb"))
	if err != nil {
		return nil, err
	}
	fab, err := plan.BuiltinFabric(arg(d, "fabric", "dgx-a100"))
	if err != nil {
		return nil, err
	}
	nodes, _ := strconv.Atoi(arg(d, "nodes", "1"))
	procs, _ := strconv.Atoi(arg(d, "procs", "8"))
	mem, _ := strconv.ParseFloat(arg(d, "mem", "0"), 64)
	return &plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: nodes, ProcsPerNode: procs, MemPerRank: int64(mem * (1 << 20))}}, nil
}

func run(t *testing.T, d *datadriven.TestData) (string, error) {
	var b strings.Builder
	switch d.Cmd {
	case "model":
		var m *plan.Model
		var err error
		if d.HasArg("name") {
			m, err = plan.NamedModel(arg(d, "name", ""))
		} else {
			m, err = plan.ParseModel([]byte(d.Input))
		}
		if err != nil {
			return "", err
		}
		fmt.Fprint(&b, plan.Describe(m))
	case "device":
		var dev *plan.Device
		var err error
		if d.HasArg("name") {
			dev, err = plan.BuiltinDevice(arg(d, "name", ""))
		} else {
			dev, err = plan.ParseDevice([]byte(d.Input))
		}
		if err != nil {
			return "", err
		}
		for _, f := range []float64{1e8, 1e9, 3e9, 1e10, 1e11, 1e12, 1e13} {
			fmt.Fprintf(&b, "efficiency at %.0e FLOPs: %.3f\n", f, dev.Fraction(f))
		}
		if len(dev.SideBySide) > 0 || dev.HandoffSeconds > 0 {
			for _, r := range []int{1, 2, 3, 4, 8} {
				fmt.Fprintf(&b, "side by side, %d ranks: %.3f\n", r, dev.SideBySideFactor(r))
			}
			fmt.Fprintf(&b, "hand-off %.0f µs\n", 1e6*dev.HandoffSeconds)
		}
	case "fabric":
		var f *plan.Fabric
		var err error
		if d.HasArg("name") {
			f, err = plan.BuiltinFabric(arg(d, "name", ""))
		} else {
			f, err = plan.ParseFabric([]byte(d.Input))
		}
		if err != nil {
			return "", err
		}
		for _, g := range []plan.Group{{PerNode: 2, Nodes: 1}, {PerNode: 8, Nodes: 1}, {PerNode: 1, Nodes: 4}, {PerNode: 8, Nodes: 4}, {PerNode: 8, Nodes: 512}} {
			for _, bytes := range []float64{1 << 10, 1 << 20, 1 << 30} {
				fmt.Fprintf(&b, "%d×%d ranks %7.0f KiB: allreduce %9.3f ms allgather %9.3f ms reducescatter %9.3f ms\n",
					g.Nodes, g.PerNode, bytes/1024, 1e3*f.AllReduceTime(g, bytes), 1e3*f.AllGatherTime(g, bytes), 1e3*f.ReduceScatterTime(g, bytes))
			}
		}
		fmt.Fprintf(&b, "p2p 1 MiB: intra %.3f ms inter %.3f ms\n", 1e3*f.P2PTime(false, 1<<20), 1e3*f.P2PTime(true, 1<<20))
	case "plan":
		e, err := env(t, d)
		if err != nil {
			return "", err
		}
		ps, err := plan.Search(e)
		if err != nil {
			return "", err
		}
		top, _ := strconv.Atoi(arg(d, "top", "0"))
		explain, _ := strconv.Atoi(arg(d, "explain", "0"))
		for i, p := range ps {
			if top > 0 && i >= top {
				fmt.Fprintf(&b, "… %d more\n", len(ps)-top)
				break
			}
			fmt.Fprintln(&b, p.Line())
		}
		for i := 0; i < explain && i < len(ps); i++ {
			fmt.Fprint(&b, ps[i].Explain(e))
		}
		fmt.Fprintln(&b, plan.Choose(e, ps))
	case "scale":
		e, err := env(t, d)
		if err != nil {
			return "", err
		}
		a, _ := d.Arg("nodes")
		var nodes []int
		for _, v := range a.Vals {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, n)
		}
		for _, sp := range plan.Sweep(e, nodes) {
			if sp.Err != nil {
				fmt.Fprintf(&b, "nodes %d: %v\n", sp.Nodes, sp.Err)
				continue
			}
			what, share := sp.Best.Limit()
			fmt.Fprintf(&b, "nodes %d: %s (limit: %s %.0f%%)\n", sp.Nodes, strings.TrimPrefix(sp.Best.Line(), "plan: "), what, 100*share)
		}
		for _, f := range plan.Families(e, nodes) {
			fmt.Fprintln(&b, f)
		}
	case "profile":
		m, err := plan.NamedModel(arg(d, "model", "gpt"))
		if err != nil {
			return "", err
		}
		mbs, _ := strconv.Atoi(arg(d, "microbatch", "1"))
		var spans []plan.Span
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			var s plan.Span
			if _, err := fmt.Sscan(line, &s.Rank, &s.Name, &s.Seconds); err != nil {
				t.Fatalf("span %q: %v", line, err)
			}
			spans = append(spans, s)
		}
		ms, err := plan.Measure(m, mbs, spans)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "measured %.4g FLOP/s at %.4g FLOPs per layer, head at %.3g of it, %d stages, %d passes\n", ms.Rate, ms.GEMM, ms.Head, ms.Stages, ms.Passes)
		dev := &plan.Device{Name: "cpu", MemoryBytes: 1 << 30, MemoryBandwidth: 1e10}
		plan.AddMeasurement(dev, "fp32", ms)
		half := ms
		half.GEMM, half.Rate = ms.GEMM/4, ms.Rate/2
		plan.AddMeasurement(dev, "fp32", half)
		fmt.Fprintf(&b, "device: peak %.4g, curve %v (with a point at a quarter of the size and half the rate)\n", dev.PeakFLOPs["fp32"], dev.Efficiency)
	case "handoff", "sidebyside":
		// input: "rank track name start seconds" per span; for
		// sidebyside each line begins with p (pipelined) or a (alone)
		var spans, alone []plan.Span
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			set := "p"
			if d.Cmd == "sidebyside" {
				set, f = f[0], f[1:]
			}
			var s plan.Span
			if _, err := fmt.Sscan(strings.Join(f, " "), &s.Rank, &s.Track, &s.Name, &s.Start, &s.Seconds); err != nil {
				t.Fatalf("span %q: %v", line, err)
			}
			if set == "a" {
				alone = append(alone, s)
			} else {
				spans = append(spans, s)
			}
		}
		if d.Cmd == "handoff" {
			h, n, err := plan.MeasureHandoff(spans)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "hand-off %.0f µs beyond the fastest, of %d\n", 1e6*h, n)
			break
		}
		sb, err := plan.MeasureSideBySide(spans, alone)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d ranks: ratio %.3f overlap %.3f factor %.3f\n", sb.Ranks, sb.Ratio, sb.Overlap, sb.Factor)
	case "predict":
		// predict procs=P [cores=C] dp= pp= schedule= microbatches=
		// (input: a device): GPT-mini's breakdown on the local fabric
		dev, err := plan.ParseDevice([]byte(d.Input))
		if err != nil {
			return "", err
		}
		m, _ := plan.NamedModel("gpt")
		fab, _ := plan.BuiltinFabric("local")
		atoi := func(k, def string) int { n, _ := strconv.Atoi(arg(d, k, def)); return n }
		dp, pp := atoi("dp", "1"), atoi("pp", "1")
		m.GlobalBatch = atoi("batch", "32")
		c := plan.Cluster{Nodes: 1, ProcsPerNode: atoi("procs", "1"), Cores: atoi("cores", "0")}
		l := plan.Layout{DP: dp, PP: pp, TP: 1, Shard: "none", Microbatches: atoi("microbatches", "1"), Schedule: arg(d, "schedule", "none"), Virtual: 1}
		p, err := plan.Predict(&plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: c}, l)
		if err != nil {
			return "", err
		}
		tm := p.Times
		fmt.Fprintf(&b, "%v: step %.2f ms = compute %.2f + bubble %.2f + pp %.2f + dp %.2f + optimizer %.2f; tokens/s %.0f\n",
			l, 1e3*tm.Step, 1e3*tm.Compute, 1e3*tm.Bubble, 1e3*tm.PP, 1e3*tm.DP, 1e3*tm.Optimizer, p.TokensPerSec)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	return b.String(), nil
}
