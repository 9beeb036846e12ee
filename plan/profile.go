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
}

// Measurement is the rate whole layers reached in a profiled run.
type Measurement struct {
	// GEMM is the block's forward weight-product FLOPs per microbatch
	// (the efficiency curve's abscissa); Rate the FLOP/s reached over the
	// median pass of every (stage, pass kind).
	GEMM, Rate float64
	Stages     int
	Passes     int // spans used
}

// Measure turns a run's compute spans into a Measurement for model m
// (GPT-mini for `cohort bench pipeline`) trained in microbatches of
// microBatch sequences: each span's FLOPs are those of its stage's layers
// (the stages split the layers as pipeline.Uniform does; the first adds
// the embedding, the last the head), and the rate is the sum of the
// median pass FLOPs over the sum of the median pass times.
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
	var flops, secs float64
	n := 0
	for k, ds := range durs {
		layers := float64(m.Layers / stages)
		if k.stage < m.Layers%stages {
			layers++
		}
		last := k.stage == stages-1
		var f float64
		switch k.kind {
		case 'F':
			f = layers * blk.F
			if last {
				f += head.F
			}
		case 'B':
			f = layers * (blk.B + blk.W)
			if last {
				f += head.B + head.W
			}
		case 'I':
			f = layers * blk.B
			if last {
				f += head.B
			}
		case 'W':
			f = layers * blk.W
			if last {
				f += head.W
			}
		}
		flops += f
		secs += median(ds)
		n += len(ds)
	}
	return Measurement{GEMM: blk.GEMM, Rate: flops / secs, Stages: stages, Passes: n}, nil
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
		pts = append(pts, EfficiencyPoint{FLOPs: p.FLOPs, Fraction: p.Fraction * old / peak})
	}
	pts = append(pts, EfficiencyPoint{FLOPs: ms.GEMM, Fraction: ms.Rate / peak})
	sort.Slice(pts, func(i, j int) bool { return pts[i].FLOPs < pts[j].FLOPs })
	d.PeakFLOPs[dtype] = peak
	d.Efficiency = pts
	d.WholeLayer = true
}
