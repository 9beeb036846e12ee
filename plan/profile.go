package plan

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Span is one compute pass of a pipeline run as its trace records it
// (pipeline.Options.Span on track "compute", `cohort bench pipeline
// --trace`): the rank, the action's name ("F3", "B3", "I3", "W3", with
// "/s5" after it when ranks hold several stages) and its duration.
type Span struct {
	Rank    int
	Name    string
	Seconds float64
	// Start is when the span began, in seconds on a clock common to the
	// ranks (a merged trace's); Track its track, "" for "compute".
	// MeasureHandoff and MeasureSideBySide need them; Measure does not.
	Start float64
	Track string
}

func (s Span) end() float64 { return s.Start + s.Seconds }

// Measurement is the rate whole layers reached in a profiled run.
type Measurement struct {
	// GEMM is the block's forward weight-product FLOPs per microbatch
	// (the efficiency curve's abscissa); Rate the FLOP/s reached over the
	// median pass of every (stage, pass kind).
	GEMM, Rate float64
	// Head is the rate the output layer and its loss reached, as a
	// fraction of Rate (their softmax and cross-entropy over the
	// vocabulary run slower than the blocks' products); 1 when one stage
	// held everything and they could not be told apart.
	Head   float64
	Stages int
	Passes int // spans used
}

// Measure turns a run's compute spans into a Measurement for model m
// (GPT-mini for `cohort bench pipeline`) trained in microbatches of
// microBatch sequences: each span's FLOPs are those of its stage's layers
// (the stages split the layers as pipeline.Uniform does; the first adds
// the embedding, the last the head). The blocks' rate is the sum of the
// median pass FLOPs of the stages before the last over the sum of their
// median pass times; the head's is its FLOPs over the time the last
// stage's median passes took beyond its blocks at that rate. A trace of
// one stage gives one rate for all of it.
func Measure(m *Model, microBatch int, spans []Span) (Measurement, error) {
	if m.Kind == "mlp" {
		return Measurement{}, fmt.Errorf("plan: profile: model %s: only a GPT's pipeline traces are read", m.Name)
	}
	if microBatch < 1 {
		return Measurement{}, fmt.Errorf("plan: profile: microbatch %d: want the sequences per microbatch of the traced run", microBatch)
	}
	type key struct {
		stage int
		kind  byte
	}
	durs := map[key][]float64{}
	ranks, maxStage := 0, 0
	for _, s := range spans {
		if s.Name == "" || !strings.ContainsRune("FBIW", rune(s.Name[0])) {
			continue
		}
		name, stagePart, hasStage := strings.Cut(s.Name[1:], "/s")
		if _, err := strconv.Atoi(name); err != nil {
			continue
		}
		stage := s.Rank
		if hasStage {
			st, err := strconv.Atoi(stagePart)
			if err != nil {
				return Measurement{}, fmt.Errorf("plan: profile: span %q: bad stage", s.Name)
			}
			stage = st
		}
		if !(s.Seconds > 0) {
			return Measurement{}, fmt.Errorf("plan: profile: span %q of rank %d lasts %v s", s.Name, s.Rank, s.Seconds)
		}
		ranks = max(ranks, s.Rank+1)
		maxStage = max(maxStage, stage)
		k := key{stage, s.Name[0]}
		durs[k] = append(durs[k], s.Seconds)
	}
	if len(durs) == 0 {
		return Measurement{}, fmt.Errorf("plan: profile: no compute spans (F, B, I, W) in the trace: record one with cohort bench pipeline --trace DIR and merge it with cohort trace merge DIR")
	}
	stages := maxStage + 1
	if stages > m.Layers {
		return Measurement{}, fmt.Errorf("plan: profile: %d stages in the trace, model %s has %d layers", stages, m.Name, m.Layers)
	}
	mm := *m
	mm.Recompute = false
	blk, head := mm.blockCost(microBatch, 1), mm.headCost(microBatch, 1)
	// Per stage: the blocks' FLOPs and the head's (last stage), and the
	// seconds of the median pass of every kind.
	blockFLOPs := make([]float64, stages)
	headFLOPs := make([]float64, stages)
	secs := make([]float64, stages)
	n := 0
	for k, ds := range durs {
		layers := float64(m.Layers / stages)
		if k.stage < m.Layers%stages {
			layers++
		}
		var bf, hf float64
		switch k.kind {
		case 'F':
			bf, hf = blk.F, head.F
		case 'B':
			bf, hf = blk.B+blk.W, head.B+head.W
		case 'I':
			bf, hf = blk.B, head.B
		case 'W':
			bf, hf = blk.W, head.W
		}
		blockFLOPs[k.stage] += layers * bf
		if k.stage == stages-1 {
			headFLOPs[k.stage] += hf
		}
		secs[k.stage] += median(ds)
		n += len(ds)
	}
	var flops, total float64
	for st := range stages {
		flops += blockFLOPs[st] + headFLOPs[st]
		total += secs[st]
	}
	ms := Measurement{GEMM: blk.GEMM, Rate: flops / total, Head: 1, Stages: stages, Passes: n}
	if stages > 1 {
		// The stages before the last hold blocks only (and the
		// embedding's lookup): their rate is the blocks'; the last
		// stage's time beyond its blocks at that rate is the head's.
		var bf, bs float64
		for st := range stages - 1 {
			bf, bs = bf+blockFLOPs[st], bs+secs[st]
		}
		last := stages - 1
		headSecs := secs[last] - blockFLOPs[last]*bs/bf
		if bf > 0 && bs > 0 && headSecs > 0 {
			ms.Rate = bf / bs
			ms.Head = math.Round(headFLOPs[last]/headSecs/ms.Rate*1e4) / 1e4 // 4 decimals: a measured figure
		}
	}
	return ms, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// AddMeasurement puts ms into d's efficiency curve for dtype: the peak is
// the best rate measured so far (earlier points are rescaled when a new
// one beats it) and the point's fraction ms.Rate/peak, replacing a point
// at the same size. The curve then describes whole layers (WholeLayer):
// the elementwise work and the attention products are in it.
func AddMeasurement(d *Device, dtype string, ms Measurement) {
	if d.PeakFLOPs == nil {
		d.PeakFLOPs = map[string]float64{}
	}
	old := d.PeakFLOPs[dtype]
	peak := math.Max(old, ms.Rate)
	var pts []EfficiencyPoint
	for _, p := range d.Efficiency {
		if p.FLOPs == ms.GEMM {
			continue
		}
		pts = append(pts, EfficiencyPoint{FLOPs: p.FLOPs, Fraction: p.Fraction * old / peak, Head: p.Head})
	}
	head := ms.Head
	if head == 1 {
		head = 0 // the default
	}
	pts = append(pts, EfficiencyPoint{FLOPs: ms.GEMM, Fraction: ms.Rate / peak, Head: head})
	sort.Slice(pts, func(i, j int) bool { return pts[i].FLOPs < pts[j].FLOPs })
	d.PeakFLOPs[dtype] = peak
	d.Efficiency = pts
	d.WholeLayer = true
}

// MeasureOptimizer returns the rate, bytes/s, at which the work of a step
// outside its pipeline ran in a profiled run of model m over stages ranks
// (one stage each): AdamW over the rank's parameters (reading parameters,
// gradients and both moments, writing parameters and moments: what the
// cost model's optimizer term moves) with the gradients' clipping, their
// zeroing and the batch's setup. outside[r] is rank r's median seconds per
// step outside the pipeline's Step (OutsideSeconds in package bench reads
// it from a trace). The rank that took longest per byte sets the rate:
// the ranks start the next step together.
func MeasureOptimizer(m *Model, outside []float64) (float64, error) {
	stages := len(outside)
	if m.Kind == "mlp" || stages < 1 || stages > m.Layers {
		return 0, fmt.Errorf("plan: profile: %d stages of model %s: want a GPT's pipeline of 1 to %d stages", stages, m.Name, m.Layers)
	}
	// Only the parameters per rank are read; any device and fabric do.
	zero, one := 0.0, 1.0
	link := &Link{Alpha: &zero, Bandwidth: &one}
	e := &Env{Model: m, Device: &Device{PeakFLOPs: map[string]float64{"fp32": 1, "bf16": 1}, MemoryBandwidth: 1,
		Efficiency: []EfficiencyPoint{{FLOPs: 1, Fraction: 1}}}, Fabric: &Fabric{Intra: link, Inter: link},
		Cluster: Cluster{Nodes: 1, ProcsPerNode: stages}}
	pr := m.precision()
	rate := math.Inf(1)
	for i, r := range e.ranks(Layout{DP: 1, PP: stages, TP: 1, Microbatches: 1, Virtual: 1}, 1) {
		if !(outside[i] > 0) {
			return 0, fmt.Errorf("plan: profile: rank %d spent %v s per step outside the pipeline: want > 0", i, outside[i])
		}
		rate = min(rate, float64(r.params*(2*pr.param+pr.grad+2*pr.opt))/outside[i])
	}
	return rate, nil
}

// MeasureHandoff returns the hand-off latency of a pipeline run's trace
// beyond the transfer itself: the median hand-off less the fastest (which
// is the message's transfer, what the fabric prices, with a receiver
// already running). A hand-off is,
// for every receive a rank waited for (a "p2p" span, recvA3<0 or
// recvG3<1, with "/s5" after it when ranks hold several stages), the time
// from the end of the producing pass on the peer (F3 of the stage before
// for an activation, B3 or I3 of the stage after for a gradient; the last
// one to end before the receive did) to the end of the receive, counted
// when the pass ended while the receiver waited. spans must hold the
// compute and p2p spans of every rank on one clock. n is how many
// hand-offs were found.
func MeasureHandoff(spans []Span) (seconds float64, n int, err error) {
	type key struct {
		rank int
		name string
	}
	ends := map[key][]float64{}
	for _, s := range spans {
		if s.Track == "" || s.Track == "compute" {
			k := key{s.Rank, s.Name}
			ends[k] = append(ends[k], s.end())
		}
	}
	for _, e := range ends {
		sort.Float64s(e)
	}
	// lastBefore returns the latest end of rank's pass name at or before t.
	lastBefore := func(rank int, name string, t float64) (float64, bool) {
		e := ends[key{rank, name}]
		i := sort.SearchFloat64s(e, t+1e-9)
		if i == 0 {
			return 0, false
		}
		return e[i-1], true
	}
	var hand []float64
	for _, s := range spans {
		if s.Track != "p2p" {
			continue
		}
		grad := strings.HasPrefix(s.Name, "recvG")
		if !grad && !strings.HasPrefix(s.Name, "recvA") {
			continue
		}
		body, stagePart, virtual := strings.Cut(s.Name[5:], "/s")
		mbPart, peerPart, ok := strings.Cut(body, "<")
		mb, err1 := strconv.Atoi(mbPart)
		peer, err2 := strconv.Atoi(peerPart)
		if !ok || err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("plan: profile: receive span %q of rank %d: want recvA3<0 or recvG3<1", s.Name, s.Rank)
		}
		suffix := ""
		if virtual {
			stage, err := strconv.Atoi(stagePart)
			if err != nil {
				return 0, 0, fmt.Errorf("plan: profile: receive span %q of rank %d: bad stage", s.Name, s.Rank)
			}
			if grad {
				stage++
			} else {
				stage--
			}
			suffix = fmt.Sprintf("/s%d", stage)
		}
		names := []string{fmt.Sprintf("F%d%s", mb, suffix)}
		if grad {
			names = []string{fmt.Sprintf("B%d%s", mb, suffix), fmt.Sprintf("I%d%s", mb, suffix)}
		}
		for _, name := range names {
			if t, ok := lastBefore(peer, name, s.end()); ok && t >= s.Start {
				hand = append(hand, s.end()-t)
			}
		}
	}
	if len(hand) == 0 {
		return 0, 0, fmt.Errorf("plan: profile: no receive waited for a pass to end: want the compute and p2p spans of every rank of a pipeline run on one clock (cohort bench pipeline --trace DIR)")
	}
	sort.Float64s(hand)
	return median(hand) - hand[0], len(hand), nil
}

// SideBySide is what MeasureSideBySide found.
type SideBySide struct {
	// Ranks is the ranks of the pipelined run; Ratio the time its passes
	// took, per microbatch summed over its stages, over the time the same
	// passes took on one rank alone; Overlap the share of the pipelined
	// passes' time during which another rank computed too.
	Ranks          int
	Ratio, Overlap float64
	// Factor is how many times its time alone a pass takes while Ranks
	// ranks compute at once, 1 + (Ratio − 1)/Overlap: the slowdown
	// charged in proportion to the overlap.
	Factor float64
}

// MeasureSideBySide compares a pipelined run's compute passes with those
// of the same model and microbatches on one rank alone (cohort bench
// pipeline --trace DIR writes the baseline's in DIR/baseline): per
// microbatch, the sum over (stage, pass kind) of the median pass time,
// pipelined against alone, at least 1. The pipelined spans must be on one clock (for
// the overlap).
func MeasureSideBySide(pipelined, alone []Span) (SideBySide, error) {
	perMicrobatch := func(spans []Span) (float64, int) {
		durs := map[string][]float64{}
		ranks := 0
		for _, s := range spans {
			if (s.Track != "" && s.Track != "compute") || s.Name == "" || !strings.ContainsRune("FBIW", rune(s.Name[0])) {
				continue
			}
			_, stage, _ := strings.Cut(s.Name, "/s")
			k := fmt.Sprintf("%d/%s/%c", s.Rank, stage, s.Name[0])
			durs[k] = append(durs[k], s.Seconds)
			ranks = max(ranks, s.Rank+1)
		}
		sum := 0.0
		for _, d := range durs {
			sum += median(d)
		}
		return sum, ranks
	}
	p, ranks := perMicrobatch(pipelined)
	a, aranks := perMicrobatch(alone)
	if !(p > 0) || !(a > 0) || aranks != 1 || ranks < 2 {
		return SideBySide{}, fmt.Errorf("plan: profile: side by side: want compute passes of a pipeline of 2 or more ranks (%d) and of one rank alone (%d)", ranks, aranks)
	}
	// overlap: per rank, the compute intervals of the other ranks merged
	var busy, shared float64
	for _, s := range pipelined {
		if (s.Track != "" && s.Track != "compute") || s.Name == "" || !strings.ContainsRune("FBIW", rune(s.Name[0])) {
			continue
		}
		busy += s.Seconds
		var iv [][2]float64
		for _, o := range pipelined {
			if o.Rank != s.Rank && (o.Track == "" || o.Track == "compute") && o.Start < s.end() && o.end() > s.Start {
				iv = append(iv, [2]float64{max(o.Start, s.Start), min(o.end(), s.end())})
			}
		}
		sort.Slice(iv, func(i, j int) bool { return iv[i][0] < iv[j][0] })
		reach := math.Inf(-1)
		for _, x := range iv {
			if x[1] > reach {
				shared += x[1] - max(x[0], reach)
				reach = x[1]
			}
		}
	}
	// Ranks do not speed each other up: a ratio below 1 is the load of
	// other processes on the baseline's run, and counts as none.
	sb := SideBySide{Ranks: ranks, Ratio: max(1, p/a), Overlap: shared / busy}
	if !(sb.Overlap > 0) {
		return SideBySide{}, fmt.Errorf("plan: profile: side by side: no pass of one rank overlaps another's: want the spans on one clock (a merged trace, or the trace directory)")
	}
	sb.Factor = 1 + (sb.Ratio-1)/sb.Overlap
	return sb, nil
}
