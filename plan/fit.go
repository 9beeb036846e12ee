package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Sample is one timed collective, as `cohort bench allreduce|allgather|
// reducescatter|broadcast` reports it: Op over World ranks on Bytes (the
// all-reduced buffer, the gathered output, the reduce-scattered input,
// the broadcast buffer), Seconds the median time.
type Sample struct {
	Op      string  // allreduce, allgather, reducescatter, or broadcast (priced as p2p on 2 ranks)
	World   int     // ranks, one per node for an inter-node fit
	Bytes   float64 // as above
	Seconds float64
}

// RingTerms returns what the fabric's cost functions charge for op on n
// ranks of one link class: time = α·steps + bytes·factor/β. A ring
// all-reduce takes 2(n−1) steps and moves 2(n−1)/n of the buffer through
// each rank; an all-gather or reduce-scatter (n−1) and (n−1)/n; a p2p
// message (a broadcast on 2 ranks) 1 and 1. These are the terms of
// ringTime and P2PTime, so that a fit of measured times through them
// gives back the measured times when the fabric prices the same calls,
// whichever algorithm cohort chose for each size (recursive doubling for
// small all-reduces, a direct exchange on 2 ranks): α and β are then
// what the ring model needs, not the links' raw figures.
func RingTerms(op string, n int) (steps, factor float64, err error) {
	if n < 2 {
		return 0, 0, fmt.Errorf("plan: fit: %s on %d rank(s): want 2 or more", op, n)
	}
	fn := float64(n)
	switch op {
	case AllReduce:
		return 2 * (fn - 1), 2 * (fn - 1) / fn, nil
	case AllGather, ReduceScatter:
		return fn - 1, (fn - 1) / fn, nil
	case P2P, "broadcast":
		if n != 2 {
			return 0, 0, fmt.Errorf("plan: fit: %s on %d ranks: only 2 ranks price as one p2p message", op, n)
		}
		return 1, 1, nil
	}
	return 0, 0, fmt.Errorf("plan: fit: unknown collective %q (want allreduce, allgather, reducescatter, broadcast or p2p)", op)
}

// LinkFit is α and β fitted to one collective's samples, and how well
// they fit.
type LinkFit struct {
	Op        string  // the fabric's name for it: allreduce, allgather, reducescatter or p2p
	Alpha     float64 // seconds per step
	Bandwidth float64 // bytes/s
	Samples   []Sample
	// Residuals are (predicted − measured)/measured for each sample, in
	// order; Worst is the largest in magnitude.
	Residuals []float64
	Worst     float64
	// AlphaClamped: the unconstrained fit's α was negative (the small
	// sizes ran faster than the large ones' line predicts) and α is 0.
	AlphaClamped bool
	// Break and Bandwidth2, where Break > 0: a second β for the bytes of
	// a buffer past Break (Link.Beyond), which the fit chose because one
	// line left the large sizes far off (see FitLink).
	Break, Bandwidth2 float64
}

// FitLink fits α and β to samples of one collective on one link class
// (any world sizes of 2 or more, broadcasts on 2 ranks only) by least
// squares on the relative error: it minimises Σ((α·sᵢ + xᵢ/β − tᵢ)/tᵢ)²
// with sᵢ and xᵢ = bytesᵢ·factorᵢ from RingTerms, so that a 4 KiB
// latency counts as much as a 64 MiB transfer. α is kept ≥ 0. It is an
// error when the samples cannot separate α from β (fewer than two
// distinct sizes) or when the bytes do not explain the times (β ≤ 0).
func FitLink(samples []Sample) (LinkFit, error) {
	if len(samples) == 0 {
		return LinkFit{}, errors.New("plan: fit: no samples")
	}
	op := samples[0].Op
	if op == "broadcast" {
		op = P2P
	}
	f := LinkFit{Op: op, Samples: samples}
	s := make([]float64, len(samples))
	x := make([]float64, len(samples))
	for i, sm := range samples {
		o := sm.Op
		if o == "broadcast" {
			o = P2P
		}
		if o != op {
			return LinkFit{}, fmt.Errorf("plan: fit: samples of %s and %s together: fit one collective at a time", samples[0].Op, sm.Op)
		}
		if !positive(sm.Bytes) || !positive(sm.Seconds) {
			return LinkFit{}, fmt.Errorf("plan: fit: %s sample %d: %v bytes in %v s: want both > 0", op, i, sm.Bytes, sm.Seconds)
		}
		steps, factor, err := RingTerms(sm.Op, sm.World)
		if err != nil {
			return LinkFit{}, err
		}
		s[i], x[i] = steps, sm.Bytes*factor
	}
	// Weighted normal equations, weights 1/tᵢ²: unknowns α and γ = 1/β.
	var ss, sx, xx, st, xt float64
	for i, sm := range samples {
		w := 1 / (sm.Seconds * sm.Seconds)
		ss += w * s[i] * s[i]
		sx += w * s[i] * x[i]
		xx += w * x[i] * x[i]
		st += w * s[i] * sm.Seconds
		xt += w * x[i] * sm.Seconds
	}
	det := ss*xx - sx*sx
	if !(det > 1e-9*ss*xx) {
		return LinkFit{}, fmt.Errorf("plan: fit: %s: %d sample(s) cannot separate latency from bandwidth: want two or more distinct sizes", op, len(samples))
	}
	alpha := (st*xx - sx*xt) / det
	gamma := (ss*xt - sx*st) / det
	if alpha < 0 {
		// The constrained optimum lies on α = 0.
		alpha, gamma, f.AlphaClamped = 0, xt/xx, true
	}
	if !(gamma > 0) {
		return LinkFit{}, fmt.Errorf("plan: fit: %s: the times do not grow with the bytes (fitted 1/β = %g): measure larger sizes", op, gamma)
	}
	f.Alpha, f.Bandwidth = alpha, 1/gamma
	f.residuals(s, x)
	if two, ok := fitTwo(f, s, x); ok {
		return two, nil
	}
	return f, nil
}

// residuals sets f's residuals for samples with steps s and ring bytes x
// (bytes·factor).
func (f *LinkFit) residuals(s, x []float64) {
	c := cost{alpha: f.Alpha, beta: f.Bandwidth, brk: f.Break, beta2: f.Bandwidth2}
	f.Residuals, f.Worst = nil, 0
	for i, sm := range f.Samples {
		factor := x[i] / sm.Bytes
		r := (f.Alpha*s[i] + factor*c.perByte(sm.Bytes) - sm.Seconds) / sm.Seconds
		f.Residuals = append(f.Residuals, r)
		if math.Abs(r) > math.Abs(f.Worst) {
			f.Worst = r
		}
	}
}

// Two segments: a second β is worth its parameter only when one line is
// off by more than twoSegmentWorst somewhere and two cut the sum of
// squared relative residuals to at most twoSegmentGain of one line's.
const (
	twoSegmentWorst = 0.25
	twoSegmentGain  = 0.5
)

// fitTwo tries a second β beyond each sample size that leaves at least
// two distinct sizes at or below it and two above (the same weighted
// least squares with unknowns α, 1/β and 1/β₂, α ≥ 0), and returns the
// best when it beats the line one by the margins above.
func fitTwo(one LinkFit, s, x []float64) (LinkFit, bool) {
	if math.Abs(one.Worst) <= twoSegmentWorst {
		return one, false
	}
	ssr := func(f LinkFit) float64 {
		t := 0.0
		for _, r := range f.Residuals {
			t += r * r
		}
		return t
	}
	var sizes []float64
	for _, sm := range one.Samples {
		if !slices.Contains(sizes, sm.Bytes) {
			sizes = append(sizes, sm.Bytes)
		}
	}
	sort.Float64s(sizes)
	best, bestSSR := one, twoSegmentGain*ssr(one)
	found := false
	for k := 1; k+2 < len(sizes); k++ {
		brk := sizes[k]
		// features: steps, ring bytes up to the break, ring bytes past it
		var a [3][3]float64
		var b [3]float64
		for i, sm := range one.Samples {
			factor := x[i] / sm.Bytes
			v := [3]float64{s[i], factor * min(sm.Bytes, brk), factor * max(0, sm.Bytes-brk)}
			w := 1 / (sm.Seconds * sm.Seconds)
			for p := range 3 {
				for q := range 3 {
					a[p][q] += w * v[p] * v[q]
				}
				b[p] += w * v[p] * sm.Seconds
			}
		}
		sol, ok := solve3(a, b)
		clamped := false
		if ok && sol[0] < 0 {
			// α = 0: the two γ alone
			det := a[1][1]*a[2][2] - a[1][2]*a[2][1]
			if !(det > 0) {
				continue
			}
			sol = [3]float64{0, (b[1]*a[2][2] - a[1][2]*b[2]) / det, (a[1][1]*b[2] - a[2][1]*b[1]) / det}
			clamped = true
		}
		if !ok || !(sol[1] > 0) || !(sol[2] > 0) {
			continue
		}
		f := LinkFit{Op: one.Op, Samples: one.Samples, Alpha: sol[0], Bandwidth: 1 / sol[1], AlphaClamped: clamped,
			Break: brk, Bandwidth2: 1 / sol[2]}
		f.residuals(s, x)
		if v := ssr(f); v < bestSSR {
			best, bestSSR, found = f, v, true
		}
	}
	return best, found
}

// solve3 solves a·v = b by Gaussian elimination with partial pivoting.
func solve3(a [3][3]float64, b [3]float64) ([3]float64, bool) {
	scale := math.Max(math.Abs(a[0][0]), math.Max(math.Abs(a[1][1]), math.Abs(a[2][2])))
	for c := range 3 {
		p := c
		for r := c + 1; r < 3; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if !(math.Abs(a[p][c]) > 1e-12*scale) {
			return [3]float64{}, false
		}
		a[c], a[p] = a[p], a[c]
		b[c], b[p] = b[p], b[c]
		for r := c + 1; r < 3; r++ {
			m := a[r][c] / a[c][c]
			for q := c; q < 3; q++ {
				a[r][q] -= m * a[c][q]
			}
			b[r] -= m * b[c]
		}
	}
	var v [3]float64
	for r := 2; r >= 0; r-- {
		t := b[r]
		for q := r + 1; q < 3; q++ {
			t -= a[r][q] * v[q]
		}
		v[r] = t / a[r][r]
	}
	return v, true
}

// FitClass fits every collective found in samples (one link class, e.g.
// the ranks of one host over shared memory, or one rank per host over
// TCP), one LinkFit per collective in the order allreduce, allgather,
// reducescatter, p2p.
func FitClass(samples []Sample) ([]LinkFit, error) {
	by := map[string][]Sample{}
	for _, s := range samples {
		op := s.Op
		if op == "broadcast" {
			op = P2P
		}
		by[op] = append(by[op], s)
	}
	var fits []LinkFit
	for _, op := range []string{AllReduce, AllGather, ReduceScatter, P2P} {
		if len(by[op]) == 0 {
			continue
		}
		f, err := FitLink(by[op])
		if err != nil {
			return nil, err
		}
		fits = append(fits, f)
		delete(by, op)
	}
	if len(by) > 0 {
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("plan: fit: unknown collective(s) %s (want allreduce, allgather, reducescatter or broadcast)", strings.Join(keys, ", "))
	}
	if len(fits) == 0 {
		return nil, errors.New("plan: fit: no samples")
	}
	return fits, nil
}

// ClassFit is the fits of one link class and the transport they measured.
type ClassFit struct {
	Transport string // shm, tcp, …: documentation
	Fits      []LinkFit
}

// FabricFromFits builds a fabric named name from the fits of the intra-
// and inter-node link classes (either may be nil: its figures then come
// from base, which may be nil when both are given). A class's link is its
// all-reduce fit (the first fit when it has none); every other
// collective fitted, and an all-reduce that is not the link's, goes into
// Collectives, so that the fabric prices each collective with its own
// fit. The result is validated.
func FabricFromFits(name string, intra, inter *ClassFit, base *Fabric) (*Fabric, error) {
	f := &Fabric{Name: name}
	if base != nil {
		f.Intra, f.Inter = base.Intra, base.Inter
		for op, m := range base.Collectives {
			for class, l := range m {
				if (class == "intra" && intra != nil) || (class == "inter" && inter != nil) {
					continue // refitted: the base's override would hide the fit
				}
				f.setOverride(op, class, l)
			}
		}
	}
	var src []string
	for _, c := range []struct {
		class string
		fit   *ClassFit
		link  **Link
	}{{"intra", intra, &f.Intra}, {"inter", inter, &f.Inter}} {
		if c.fit == nil {
			if base != nil {
				src = append(src, fmt.Sprintf("%s from fabric %s", c.class, base.Name))
			}
			continue
		}
		if len(c.fit.Fits) == 0 {
			return nil, fmt.Errorf("plan: fit: %s: no collectives fitted", c.class)
		}
		main := c.fit.Fits[0]
		for _, lf := range c.fit.Fits {
			if lf.Op == AllReduce {
				main = lf
			}
		}
		*c.link = newLink(c.fit.Transport, main)
		var parts []string
		for _, lf := range c.fit.Fits {
			if lf.Op != main.Op {
				f.setOverride(lf.Op, c.class, newLink(c.fit.Transport, lf))
			}
			beyond := ""
			if lf.Break > 0 {
				beyond = fmt.Sprintf(", beyond %s β %.3g B/s", sizeName(lf.Break), lf.Bandwidth2)
			}
			parts = append(parts, fmt.Sprintf("%s α %.3g s β %.3g B/s%s (%d sizes, worst residual %+.1f%%)",
				lf.Op, lf.Alpha, lf.Bandwidth, beyond, len(lf.Samples), 100*lf.Worst))
		}
		src = append(src, fmt.Sprintf("%s (%s) fitted to cohort bench on %s ranks: %s", c.class, c.fit.Transport, worlds(c.fit.Fits), strings.Join(parts, "; ")))
	}
	f.Source = "cohort plan fit: " + strings.Join(src, ". ")
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// newLink keeps four significant digits of the fit: the measurements
// carry no more.
func newLink(transport string, lf LinkFit) *Link {
	a, b := round4(lf.Alpha), round4(lf.Bandwidth)
	l := &Link{Transport: transport, Alpha: &a, Bandwidth: &b}
	if lf.Break > 0 {
		l.Beyond = &Segment{Bytes: lf.Break, Bandwidth: round4(lf.Bandwidth2)}
	}
	return l
}

func round4(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// Report describes the fit in two lines: the figures, then each
// sample's residual.
func (f LinkFit) Report(class, transport string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s: alpha %.3f us bandwidth %.4g B/s (%.3g Gbit/s) worst residual %+.1f%%",
		class, transport, f.Op, 1e6*f.Alpha, f.Bandwidth, 8*f.Bandwidth/1e9, 100*f.Worst)
	if f.Break > 0 {
		fmt.Fprintf(&b, " beyond %s bandwidth %.4g B/s", sizeName(f.Break), f.Bandwidth2)
	}
	if f.AlphaClamped {
		b.WriteString(" (alpha clamped to 0)")
	}
	b.WriteString("\n  residuals:")
	for i, r := range f.Residuals {
		fmt.Fprintf(&b, " %s/%d:%+.1f%%", sizeName(f.Samples[i].Bytes), f.Samples[i].World, 100*r)
	}
	b.WriteString("\n")
	return b.String()
}

// sizeName writes 4096 as 4KiB, 1048576 as 1MiB.
func sizeName(bytes float64) string {
	switch b := int64(bytes); {
	case float64(b) != bytes:
		return strconv.FormatFloat(bytes, 'g', -1, 64)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	default:
		return fmt.Sprintf("%dB", b)
	}
}

func (f *Fabric) setOverride(op, class string, l *Link) {
	if f.Collectives == nil {
		f.Collectives = map[string]map[string]*Link{}
	}
	if f.Collectives[op] == nil {
		f.Collectives[op] = map[string]*Link{}
	}
	f.Collectives[op][class] = l
}

// worlds lists the world sizes the fits were measured at ("2", "2, 4").
func worlds(fits []LinkFit) string {
	seen := map[int]bool{}
	var ws []int
	for _, lf := range fits {
		for _, s := range lf.Samples {
			if !seen[s.World] {
				seen[s.World] = true
				ws = append(ws, s.World)
			}
		}
	}
	sort.Ints(ws)
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprint(w)
	}
	return strings.Join(parts, ", ")
}

// Predict returns the time the fabric gives a sample's call: its class is
// intra (world ranks on one node) or inter (one rank on each of world
// nodes). It is what FitLink's residuals compare with, through the
// fabric's own cost functions.
func (f *Fabric) Predict(s Sample, inter bool) (float64, error) {
	g := Group{PerNode: s.World, Nodes: 1}
	if inter {
		g = Group{PerNode: 1, Nodes: s.World}
	}
	switch s.Op {
	case AllReduce:
		return f.AllReduceTime(g, s.Bytes), nil
	case AllGather:
		return f.AllGatherTime(g, s.Bytes), nil
	case ReduceScatter:
		return f.ReduceScatterTime(g, s.Bytes), nil
	case P2P, "broadcast":
		if s.World != 2 {
			return 0, fmt.Errorf("plan: %s on %d ranks is not one p2p message", s.Op, s.World)
		}
		return f.P2PTime(inter, s.Bytes), nil
	}
	return 0, fmt.Errorf("plan: unknown collective %q", s.Op)
}
