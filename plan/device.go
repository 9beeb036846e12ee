package plan

import (
	"embed"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Device describes one accelerator (or one CPU rank): what it can compute
// and hold. Read from JSON (--device FILE) or named (BuiltinDevice).
type Device struct {
	Name string `json:"name"`
	// PeakFLOPs is the peak rate per dtype ("fp32", "bf16", …), FLOP/s.
	PeakFLOPs map[string]float64 `json:"peak_flops"`
	// MemoryBytes is the memory one rank may use.
	MemoryBytes int64 `json:"memory_bytes"`
	// MemoryBandwidth is bytes/s to that memory: the elementwise work
	// (norms, activations, softmax) and the optimizer step are bound by it.
	MemoryBandwidth float64 `json:"memory_bandwidth"`
	// Efficiency is the fraction of peak that the matrix products of one
	// layer reach, as a function of the layer's forward FLOPs per
	// microbatch on one rank (larger products run closer to peak).
	// Points are sorted by FLOPs; between them the fraction is
	// interpolated linearly in log(FLOPs), beyond them held.
	Efficiency []EfficiencyPoint `json:"efficiency"`
	// WholeLayer says the curve was measured on whole layers (cohort plan
	// profile): it then covers the elementwise work and the attention
	// products too, which are not priced apart.
	WholeLayer bool `json:"whole_layer,omitempty"`
	// SideBySide says how much longer a rank computes when other ranks of
	// its node compute at the same time (memory bandwidth and shared
	// caches, or SMT siblings, shared between them): a rank's compute
	// takes Factor times its time alone (the curve's) with Ranks ranks of
	// the node computing at once. Between points, and from (1 rank, 1),
	// the factor is interpolated linearly in ranks, beyond the last held.
	// Measured by cohort plan profile (MeasureSideBySide); none: 1.
	SideBySide []SideBySidePoint `json:"side_by_side,omitempty"`
	// HandoffSeconds is the time from the end of a pipeline stage's pass
	// to the end of the next stage's receive of its output, when that
	// stage is waiting for it, beyond the fabric's point-to-point time:
	// waking the receiving rank and the executor's bookkeeping. It is
	// charged on every hand-off on a pipeline's critical path and on
	// every message step of the step-end synchronisation. Measured by
	// cohort plan profile (MeasureHandoff); 0: the fabric's time alone.
	HandoffSeconds float64 `json:"handoff_seconds,omitempty"`
	// TensorParallel is what tensor parallelism pays on this device beyond
	// the curve and the fabric, per tensor-parallel degree, measured by
	// cohort plan profile from a tensor-parallel run (MeasureTP). Between
	// points, and from (1 rank: 1, 0 s), figures are interpolated
	// linearly in ranks, beyond the last held; none: the curve and the
	// fabric alone.
	TensorParallel []TPPoint `json:"tensor_parallel,omitempty"`
	// Source says where the figures come from.
	Source string `json:"source,omitempty"`
}

// EfficiencyPoint is one point of Device.Efficiency.
type EfficiencyPoint struct {
	FLOPs    float64 `json:"flops"`
	Fraction float64 `json:"fraction"`
	// Head, on a curve of whole layers, is the rate a GPT's output layer
	// and loss reach, as a fraction of the blocks' at this point (their
	// microbatch): measured by cohort plan profile; 0 means 1.
	Head float64 `json:"head,omitempty"`
}

// TPPoint is one point of Device.TensorParallel: a rank of a
// tensor-parallel group of Ranks ranks.
type TPPoint struct {
	Ranks int `json:"ranks"`
	// Compute is the sharded layers' compute time (forward and backward,
	// outside the collectives) over the time the curve gives their FLOPs:
	// narrower products run slower per FLOP, and the LayerNorms, residual
	// additions and the loss's elementwise work are replicated, not split.
	Compute float64 `json:"compute"`
	// CollectiveSeconds is how much longer each of the activation
	// all-reduces (Megatron's f and g) takes, as its caller waits for it,
	// than the fabric's time for its size: waking the peer, and the peer
	// arriving late.
	CollectiveSeconds float64 `json:"collective_seconds"`
	// SmallSeconds is the same for the loss's small all-reduces (the
	// vocabulary-parallel cross-entropy's row maxima and sums).
	SmallSeconds float64 `json:"small_seconds,omitempty"`
}

// SideBySidePoint is one point of Device.SideBySide.
type SideBySidePoint struct {
	Ranks  int     `json:"ranks"`
	Factor float64 `json:"factor"`
}

// Validate names the first unusable field.
func (d *Device) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("plan: device %s: %s is %v: want %s", d.Name, field, v, want)
	}
	if len(d.PeakFLOPs) == 0 {
		return bad("peak_flops", "missing", "FLOP/s per dtype, e.g. {\"bf16\": 312e12}")
	}
	for _, k := range sortedKeys(d.PeakFLOPs) {
		if v := d.PeakFLOPs[k]; !positive(v) {
			return bad("peak_flops."+k, v, "FLOP/s > 0")
		}
	}
	if d.MemoryBytes <= 0 {
		return bad("memory_bytes", d.MemoryBytes, "bytes > 0")
	}
	if !positive(d.MemoryBandwidth) {
		return bad("memory_bandwidth", d.MemoryBandwidth, "bytes/s > 0")
	}
	if len(d.Efficiency) == 0 {
		return bad("efficiency", "missing", "at least one {flops, fraction} point")
	}
	for i, p := range d.Efficiency {
		if !(p.FLOPs > 0) {
			return bad(fmt.Sprintf("efficiency[%d].flops", i), p.FLOPs, "> 0")
		}
		if !(p.Fraction > 0 && p.Fraction <= 1) {
			return bad(fmt.Sprintf("efficiency[%d].fraction", i), p.Fraction, "in (0, 1]")
		}
		if p.Head < 0 || p.Head > 1e3 || math.IsNaN(p.Head) {
			return bad(fmt.Sprintf("efficiency[%d].head", i), p.Head, "0 (1) or a positive fraction of the point's rate")
		}
		if i > 0 && p.FLOPs <= d.Efficiency[i-1].FLOPs {
			return bad(fmt.Sprintf("efficiency[%d].flops", i), p.FLOPs, "points in increasing order of flops")
		}
	}
	for i, p := range d.SideBySide {
		if p.Ranks < 2 || (i > 0 && p.Ranks <= d.SideBySide[i-1].Ranks) {
			return bad(fmt.Sprintf("side_by_side[%d].ranks", i), p.Ranks, "at least 2, in increasing order")
		}
		if !positive(p.Factor) {
			return bad(fmt.Sprintf("side_by_side[%d].factor", i), p.Factor, "> 0")
		}
	}
	if !nonNegative(d.HandoffSeconds) {
		return bad("handoff_seconds", d.HandoffSeconds, "seconds ≥ 0")
	}
	for i, p := range d.TensorParallel {
		if p.Ranks < 2 || (i > 0 && p.Ranks <= d.TensorParallel[i-1].Ranks) {
			return bad(fmt.Sprintf("tensor_parallel[%d].ranks", i), p.Ranks, "at least 2, in increasing order")
		}
		if !positive(p.Compute) {
			return bad(fmt.Sprintf("tensor_parallel[%d].compute", i), p.Compute, "> 0")
		}
		if !nonNegative(p.CollectiveSeconds) {
			return bad(fmt.Sprintf("tensor_parallel[%d].collective_seconds", i), p.CollectiveSeconds, "seconds ≥ 0")
		}
		if !nonNegative(p.SmallSeconds) {
			return bad(fmt.Sprintf("tensor_parallel[%d].small_seconds", i), p.SmallSeconds, "seconds ≥ 0")
		}
	}
	return nil
}

// SideBySideFactor returns how many times its time alone a rank's
// compute takes while ranks ranks of its node compute at once (see
// SideBySide): 1 for one rank or a device without the figures.
func (d *Device) SideBySideFactor(ranks int) float64 { return d.sideBySide(float64(ranks)) }

// sideBySide is SideBySideFactor at a fractional count of busy ranks.
func (d *Device) sideBySide(ranks float64) float64 {
	if ranks <= 1 || len(d.SideBySide) == 0 {
		return 1
	}
	lo := SideBySidePoint{Ranks: 1, Factor: 1}
	for _, p := range d.SideBySide {
		if ranks <= float64(p.Ranks) {
			x := (ranks - float64(lo.Ranks)) / float64(p.Ranks-lo.Ranks)
			return lo.Factor + x*(p.Factor-lo.Factor)
		}
		lo = p
	}
	return lo.Factor
}

// TP returns the device's tensor-parallel figures at ranks ranks (see
// TensorParallel): for 1 rank, or a device without them, compute 1 and no
// extra seconds.
func (d *Device) TP(ranks int) TPPoint {
	lo := TPPoint{Ranks: 1, Compute: 1}
	if ranks <= 1 || len(d.TensorParallel) == 0 {
		return lo
	}
	for _, p := range d.TensorParallel {
		if ranks <= p.Ranks {
			x := float64(ranks-lo.Ranks) / float64(p.Ranks-lo.Ranks)
			return TPPoint{Ranks: ranks, Compute: lo.Compute + x*(p.Compute-lo.Compute),
				CollectiveSeconds: lo.CollectiveSeconds + x*(p.CollectiveSeconds-lo.CollectiveSeconds),
				SmallSeconds:      lo.SmallSeconds + x*(p.SmallSeconds-lo.SmallSeconds)}
		}
		lo = p
	}
	lo.Ranks = ranks
	return lo
}

// AddTP records p as the device's tensor-parallel figures at p.Ranks,
// replacing a point there.
func AddTP(d *Device, p TPPoint) {
	var pts []TPPoint
	for _, q := range d.TensorParallel {
		if q.Ranks != p.Ranks {
			pts = append(pts, q)
		}
	}
	p.Compute = math.Round(p.Compute*1e4) / 1e4
	p.CollectiveSeconds = math.Round(p.CollectiveSeconds*1e7) / 1e7
	p.SmallSeconds = math.Round(p.SmallSeconds*1e7) / 1e7
	pts = append(pts, p)
	sort.Slice(pts, func(i, j int) bool { return pts[i].Ranks < pts[j].Ranks })
	d.TensorParallel = pts
}

// AddSideBySide records factor as the device's side-by-side factor at
// ranks ranks, replacing a point there.
func AddSideBySide(d *Device, ranks int, factor float64) {
	var pts []SideBySidePoint
	for _, p := range d.SideBySide {
		if p.Ranks != ranks {
			pts = append(pts, p)
		}
	}
	pts = append(pts, SideBySidePoint{Ranks: ranks, Factor: math.Round(factor*1e4) / 1e4})
	sort.Slice(pts, func(i, j int) bool { return pts[i].Ranks < pts[j].Ranks })
	d.SideBySide = pts
}

// Peak returns the peak FLOP/s for dtype, or an error naming what the
// device has.
func (d *Device) Peak(dtype string) (float64, error) {
	if v, ok := d.PeakFLOPs[dtype]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("plan: device %s: no peak_flops.%s (has %s)", d.Name, dtype, strings.Join(sortedKeys(d.PeakFLOPs), ", "))
}

// Fraction returns the efficiency curve at flops.
func (d *Device) Fraction(flops float64) float64 {
	e := d.Efficiency
	if flops <= e[0].FLOPs {
		return e[0].Fraction
	}
	for i := 1; i < len(e); i++ {
		if flops <= e[i].FLOPs {
			x := (math.Log(flops) - math.Log(e[i-1].FLOPs)) / (math.Log(e[i].FLOPs) - math.Log(e[i-1].FLOPs))
			return e[i-1].Fraction + x*(e[i].Fraction-e[i-1].Fraction)
		}
	}
	return e[len(e)-1].Fraction
}

// HeadFraction returns the head's share of the curve's rate at flops
// (the blocks' GEMM size of the same microbatch), interpolated as
// Fraction is.
func (d *Device) HeadFraction(flops float64) float64 {
	h := func(p EfficiencyPoint) float64 {
		if p.Head > 0 {
			return p.Head
		}
		return 1
	}
	e := d.Efficiency
	if flops <= e[0].FLOPs {
		return h(e[0])
	}
	for i := 1; i < len(e); i++ {
		if flops <= e[i].FLOPs {
			x := (math.Log(flops) - math.Log(e[i-1].FLOPs)) / (math.Log(e[i].FLOPs) - math.Log(e[i-1].FLOPs))
			return h(e[i-1]) + x*(h(e[i])-h(e[i-1]))
		}
	}
	return h(e[len(e)-1])
}

// ParseDevice reads a device description from JSON and validates it.
func ParseDevice(data []byte) (*Device, error) {
	var d Device
	if err := strictDecode(data, &d); err != nil {
		return nil, fmt.Errorf("plan: device: %w", err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

//go:embed devices/*.json fabrics/*.json
var builtin embed.FS

// BuiltinDevice returns a device kept in the repository (plan/devices):
// "a100-80gb" or "h100-sxm".
func BuiltinDevice(name string) (*Device, error) {
	data, err := builtin.ReadFile("devices/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("plan: unknown device %q (have %s, or a --device file)", name, strings.Join(builtinNames("devices"), ", "))
	}
	return ParseDevice(data)
}

func builtinNames(dir string) []string {
	ents, _ := builtin.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// positive reports whether v is a finite number above 0 (not NaN).
func positive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// nonNegative reports whether v is a finite number at or above 0 (not NaN).
func nonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }
