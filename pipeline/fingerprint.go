package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cohortml/cohort/distributed"
)

// fingerprintLen is the fixed number of int64 each rank contributes to the
// fingerprint exchange, so that even ranks that disagree on everything run
// the same all-gather.
const fingerprintLen = 48

const fingerprintMagic = 0x7069706531 // "pipe1"

// fingerprint encodes what every rank must agree on: the schedule, the
// activation shape, recomputation, the split and the number of tied
// elements (counted by the ranks that hold tied copies).
func (p *Pipeline) fingerprint() []int64 {
	s := p.sched
	f := make([]int64, 0, fingerprintLen)
	f = append(f, fingerprintMagic, int64(slices.Index(Names(), s.Name)), int64(s.Stages), int64(s.Virtual), int64(s.Microbatches))
	rec := int64(0)
	if p.opts.Recompute {
		rec = 1
	}
	f = append(f, rec, int64(len(p.opts.Shape)), int64(len(p.opts.Split)))
	for _, d := range p.opts.Shape {
		f = append(f, int64(d))
	}
	for _, b := range p.opts.Split {
		f = append(f, int64(b))
	}
	if len(f) > fingerprintLen-1 {
		f = f[:fingerprintLen-1] // a split too long to show whole still differs in its prefix or length
	}
	f = append(f, make([]int64, fingerprintLen-len(f))...)
	// The last entry, compared apart: the tied elements this rank holds.
	for _, v := range p.opts.Tied {
		f[fingerprintLen-1] += int64(v.Value.Len())
	}
	return f
}

// describeFingerprint renders a fingerprint for an error message.
func describeFingerprint(f []int64) string {
	if len(f) < 8 || f[0] != fingerprintMagic {
		return fmt.Sprintf("an unknown fingerprint %v", f[:min(len(f), 4)])
	}
	name := "?"
	if i := int(f[1]); i >= 0 && i < len(Names()) {
		name = Names()[i]
	}
	ns, nsplit := int(f[6]), int(f[7])
	rest := f[8:]
	shape := rest[:min(ns, len(rest))]
	rest = rest[len(shape):]
	split := rest[:min(nsplit, len(rest))]
	return fmt.Sprintf("schedule %s stages %d virtual %d microbatches %d shape %v recompute %v split %v",
		name, f[2], f[3], f[4], shape, f[5] == 1, split)
}

// checkFingerprint all-gathers every rank's fingerprint over pg and returns
// an error naming the ranks that disagree, with what each has. The ranks
// first and last (those of the first and the last stage) must hold the
// same number of tied elements, and no other rank any.
func checkFingerprint(ctx context.Context, pg distributed.ProcessGroup, mine []int64, first, last int) error {
	all := make([]int64, fingerprintLen*pg.Size())
	if err := waitWork(ctx, pg.AllGather(ctx, distributed.I64(all), distributed.I64(mine))); err != nil {
		return fmt.Errorf("pipeline: rank %d: exchanging the plan fingerprint: %w", pg.Rank(), err)
	}
	var groups [][]int // ranks with equal fingerprints, in order of first rank
	var fps [][]int64
	for r := range pg.Size() {
		f := all[r*fingerprintLen : (r+1)*fingerprintLen-1]
		i := slices.IndexFunc(fps, func(g []int64) bool { return slices.Equal(g, f) })
		if i < 0 {
			fps = append(fps, f)
			groups = append(groups, nil)
			i = len(fps) - 1
		}
		groups[i] = append(groups[i], r)
	}
	if len(groups) == 1 {
		return checkTied(pg.Rank(), all, first, last)
	}
	var parts []string
	for i, g := range groups {
		parts = append(parts, fmt.Sprintf("%s %s", rankList(g), describeFingerprint(fps[i])))
	}
	return fmt.Errorf("pipeline: rank %d: ranks disagree on the pipeline plan: %s", pg.Rank(), strings.Join(parts, "; "))
}

// checkTied checks the tied-element counts of the gathered fingerprints.
func checkTied(me int, all []int64, first, last int) error {
	tied := func(r int) int64 { return all[(r+1)*fingerprintLen-1] }
	if first != last && tied(first) != tied(last) {
		return fmt.Errorf("pipeline: rank %d: the first and last stages disagree on tied parameters: rank %d holds %d tied elements, rank %d holds %d",
			me, first, tied(first), last, tied(last))
	}
	for r := range len(all) / fingerprintLen {
		if r != first && r != last && tied(r) != 0 {
			return fmt.Errorf("pipeline: rank %d: rank %d holds %d tied elements but neither the first nor the last stage", me, r, tied(r))
		}
	}
	return nil
}

// rankList renders "rank 3 has" or "ranks 0, 1 have".
func rankList(g []int) string {
	if len(g) == 1 {
		return fmt.Sprintf("rank %d has", g[0])
	}
	s := make([]string, len(g))
	for i, r := range g {
		s[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(s, ", ") + " have"
}
