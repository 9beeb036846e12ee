package plan_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/cohortml/cohort/plan"
)

// synthetic returns the times the ring model gives op on world ranks for
// each size, each scaled by 1+noise[i%len(noise)].
func synthetic(t *testing.T, op string, world int, alpha, bandwidth float64, sizes []float64, noise []float64) []plan.Sample {
	t.Helper()
	var out []plan.Sample
	for i, b := range sizes {
		steps, factor, err := plan.RingTerms(op, world)
		if err != nil {
			t.Fatal(err)
		}
		sec := alpha*steps + b*factor/bandwidth
		if len(noise) > 0 {
			sec *= 1 + noise[i%len(noise)]
		}
		out = append(out, plan.Sample{Op: op, World: world, Bytes: b, Seconds: sec})
	}
	return out
}

var fitSizes = []float64{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

func TestFitLinkRecoversKnownFigures(t *testing.T) {
	const alpha, bandwidth = 25e-6, 3e9
	for _, tc := range []struct {
		op     string
		worlds []int
	}{
		{plan.AllReduce, []int{2}}, {plan.AllReduce, []int{2, 3, 4, 8}},
		{plan.AllGather, []int{2}}, {plan.ReduceScatter, []int{4, 7}}, {"broadcast", []int{2}},
	} {
		t.Run(fmt.Sprintf("%s/worlds=%v", tc.op, tc.worlds), func(t *testing.T) {
			var ss []plan.Sample
			for _, w := range tc.worlds {
				ss = append(ss, synthetic(t, tc.op, w, alpha, bandwidth, fitSizes, nil)...)
			}
			f, err := plan.FitLink(ss)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(f.Alpha/alpha-1) > 1e-9 || math.Abs(f.Bandwidth/bandwidth-1) > 1e-9 {
				t.Errorf("fit α %g β %g, want %g %g", f.Alpha, f.Bandwidth, alpha, bandwidth)
			}
			if math.Abs(f.Worst) > 1e-9 {
				t.Errorf("worst residual %g on exact data", f.Worst)
			}
			// The fabric built from the fit prices the samples as measured.
			fab, err := plan.FabricFromFits("t", &plan.ClassFit{Transport: "shm", Fits: []plan.LinkFit{f}},
				&plan.ClassFit{Transport: "tcp", Fits: []plan.LinkFit{f}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, inter := range []bool{false, true} {
				for _, s := range ss {
					got, err := fab.Predict(s, inter)
					if err != nil {
						t.Fatal(err)
					}
					if math.Abs(got/s.Seconds-1) > 1e-9 {
						t.Errorf("inter=%v %s world %d %g bytes: fabric prices %g s, sample %g s", inter, s.Op, s.World, s.Bytes, got, s.Seconds)
					}
				}
			}
		})
	}
}

func TestFitLinkNoisy(t *testing.T) {
	const alpha, bandwidth = 40e-6, 1.25e8 // 1 Gbit/s
	noise := []float64{0.03, -0.02, 0.01, -0.03, 0.02}
	f, err := plan.FitLink(synthetic(t, plan.AllReduce, 2, alpha, bandwidth, fitSizes, noise))
	if err != nil {
		t.Fatal(err)
	}
	// ±3 % noise on each time moves each figure by a few percent at most.
	if math.Abs(f.Alpha/alpha-1) > 0.05 || math.Abs(f.Bandwidth/bandwidth-1) > 0.05 {
		t.Errorf("fit α %g β %g, want within 5%% of %g %g", f.Alpha, f.Bandwidth, alpha, bandwidth)
	}
	if math.Abs(f.Worst) > 0.05 {
		t.Errorf("worst residual %+.3f, want within the ±3%% noise plus the fit's slack", f.Worst)
	}
}

func TestFitLinkErrors(t *testing.T) {
	one := plan.Sample{Op: plan.AllReduce, World: 2, Bytes: 1 << 20, Seconds: 1e-3}
	for _, tc := range []struct {
		name    string
		samples []plan.Sample
		want    string
	}{
		{"empty", nil, "no samples"},
		{"one size", []plan.Sample{one, one}, "cannot separate latency from bandwidth"},
		{"world 1", []plan.Sample{{Op: plan.AllReduce, World: 1, Bytes: 1, Seconds: 1}}, "on 1 rank(s)"},
		{"mixed ops", []plan.Sample{one, {Op: plan.AllGather, World: 2, Bytes: 1, Seconds: 1}}, "fit one collective at a time"},
		{"broadcast world 4", []plan.Sample{{Op: "broadcast", World: 4, Bytes: 1, Seconds: 1}}, "only 2 ranks"},
		{"zero time", []plan.Sample{{Op: plan.AllReduce, World: 2, Bytes: 1, Seconds: 0}}, "want both > 0"},
		{"shrinking", []plan.Sample{{Op: plan.AllReduce, World: 2, Bytes: 1 << 10, Seconds: 2e-3}, {Op: plan.AllReduce, World: 2, Bytes: 1 << 20, Seconds: 1e-3}},
			"do not grow with the bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan.FitLink(tc.samples)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestFitTranscripts runs testdata/fit (go test ./plan -rewrite rewrites
// them). One command:
//
//	fit [name=NAME] [base=FABRIC]
//	<class> <transport> <op> <world> <bytes> <seconds>   one sample a line
//
// prints each fit, its residuals, and the fabric JSON, or the error.
func TestFitTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/fit", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "fit" {
				t.Fatalf("unknown command %q", d.Cmd)
			}
			out, err := runFit(d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

func runFit(d *datadriven.TestData) (string, error) {
	classes := map[string][]plan.Sample{}
	transports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		var class, transport string
		var s plan.Sample
		if _, err := fmt.Sscan(line, &class, &transport, &s.Op, &s.World, &s.Bytes, &s.Seconds); err != nil {
			return "", fmt.Errorf("sample %q: %v", line, err)
		}
		classes[class] = append(classes[class], s)
		transports[class] = transport
	}
	var b strings.Builder
	cf := map[string]*plan.ClassFit{}
	for _, class := range []string{"intra", "inter"} {
		if len(classes[class]) == 0 {
			continue
		}
		fits, err := plan.FitClass(classes[class])
		if err != nil {
			return "", err
		}
		cf[class] = &plan.ClassFit{Transport: transports[class], Fits: fits}
		for _, f := range fits {
			b.WriteString(f.Report(class, transports[class]))
		}
	}
	var base *plan.Fabric
	if name := arg(d, "base", ""); name != "" {
		var err error
		if base, err = plan.BuiltinFabric(name); err != nil {
			return "", err
		}
	}
	fab, err := plan.FabricFromFits(arg(d, "name", "fit"), cf["intra"], cf["inter"], base)
	if err != nil {
		return "", err
	}
	js, err := json.MarshalIndent(fab, "", "  ")
	if err != nil {
		return "", err
	}
	// The fabric loads back as a file would.
	if _, err := plan.ParseFabric(js); err != nil {
		return "", fmt.Errorf("the fitted fabric does not load back: %w", err)
	}
	b.Write(js)
	b.WriteString("\n")
	return b.String(), nil
}

// Times that run slower past 1 MiB (β₂ a tenth of β) leave one line far
// off at the large sizes; the fit finds the break and both β, the fabric
// it builds keeps them (beyond) and prices every sample as measured, and
// the same fabric without beyond, as an older file, is one line.
func TestFitLinkTwoSegments(t *testing.T) {
	const alpha, bandwidth, brk, bandwidth2 = 2e-6, 1e10, 1 << 20, 1e9
	var ss []plan.Sample
	for _, b := range fitSizes {
		steps, factor, _ := plan.RingTerms(plan.AllReduce, 2)
		sec := alpha*steps + factor*(min(b, brk)/bandwidth+max(0, b-brk)/bandwidth2)
		ss = append(ss, plan.Sample{Op: plan.AllReduce, World: 2, Bytes: b, Seconds: sec})
	}
	f, err := plan.FitLink(ss)
	if err != nil {
		t.Fatal(err)
	}
	if f.Break != brk || math.Abs(f.Alpha/alpha-1) > 1e-6 || math.Abs(f.Bandwidth/bandwidth-1) > 1e-6 || math.Abs(f.Bandwidth2/bandwidth2-1) > 1e-6 || math.Abs(f.Worst) > 1e-6 {
		t.Fatalf("fit %+v: want α %g β %g, beyond %d bytes β %g, exact", f, alpha, bandwidth, brk, bandwidth2)
	}
	fab, err := plan.FabricFromFits("t", &plan.ClassFit{Transport: "shm", Fits: []plan.LinkFit{f}}, &plan.ClassFit{Transport: "tcp", Fits: []plan.LinkFit{f}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fab.Intra.Beyond == nil || fab.Intra.Beyond.Bytes != brk {
		t.Fatalf("fabric intra %+v: want beyond at %d bytes", fab.Intra, brk)
	}
	for _, s := range ss {
		if got, _ := fab.Predict(s, false); math.Abs(got/s.Seconds-1) > 1e-3 {
			t.Errorf("%g bytes: fabric prices %g s, sample %g s", s.Bytes, got, s.Seconds)
		}
	}
	b, _ := json.Marshal(fab)
	old := strings.ReplaceAll(string(b), fmt.Sprintf(`,"beyond":{"bytes":%d,"bandwidth":1000000000}`, brk), "")
	if old == string(b) {
		t.Fatalf("fabric JSON %s: no beyond to remove", b)
	}
	line, err := plan.ParseFabric([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	big := plan.Sample{Op: plan.AllReduce, World: 2, Bytes: 64 << 20}
	got, _ := line.Predict(big, false)
	if want := 2*alpha + float64(big.Bytes)/bandwidth; math.Abs(got/want-1) > 1e-3 {
		t.Errorf("without beyond: %g s for 64 MiB, want one line's %g s", got, want)
	}
	// one line that fits: no second β
	if f, _ := plan.FitLink(synthetic(t, plan.AllReduce, 2, alpha, bandwidth, fitSizes, []float64{0.1, -0.1})); f.Break != 0 {
		t.Errorf("a line within 10%%: fit %+v, want no break", f)
	}
	for field, js := range map[string]string{
		"intra.beyond.bytes":     `{"name":"x","intra":{"alpha":0,"bandwidth":1,"beyond":{"bytes":0,"bandwidth":1}},"inter":{"alpha":0,"bandwidth":1}}`,
		"inter.beyond.bandwidth": `{"name":"x","intra":{"alpha":0,"bandwidth":1},"inter":{"alpha":0,"bandwidth":1,"beyond":{"bytes":10,"bandwidth":-1}}}`,
	} {
		if _, err := plan.ParseFabric([]byte(js)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming %s", js, err, field)
		}
	}
}
