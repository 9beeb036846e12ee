package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
)

var shardLine = regexp.MustCompile(`(?m)^train: (\w+) world (\d+) shard (\w+) samples/s ([0-9.]+) state-bytes/rank (\d+) param-bytes/rank (\d+) peak-rss-MiB ([0-9.]+)\n\z`)

// TestShardTrainRun runs every model under every mode for a few small
// steps at world 2 in one process and checks the report's last line: the
// sharded modes keep half of DDP's optimizer state, fsdp half of the
// parameters.
func TestShardTrainRun(t *testing.T) {
	for _, model := range []string{"mlp", "cnn", "gpt"} {
		state := map[string]int64{}
		params := map[string]int64{}
		for _, shard := range []string{"none", "zero1", "zero2", "fsdp"} {
			t.Run(model+"/"+shard, func(t *testing.T) {
				s := shardSpec{Model: model, Shard: shard, Batch: 2, Warmup: 1, Steps: 1}
				var res shardResult
				distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
					r, err := shardTrainRun(context.Background(), s, pg)
					if err != nil {
						t.Fatalf("rank %d: %v", pg.Rank(), err)
					}
					if pg.Rank() == 0 {
						res = r
					}
				})
				var out strings.Builder
				printShardTrain(&out, s, 2, res)
				m := shardLine.FindStringSubmatch(out.String())
				if m == nil || m[1] != model || m[2] != "2" || m[3] != shard {
					t.Fatalf("report does not end in the train: line:\n%s", out.String())
				}
				state[shard], _ = strconv.ParseInt(m[5], 10, 64)
				params[shard], _ = strconv.ParseInt(m[6], 10, 64)
			})
		}
		for _, shard := range []string{"zero1", "zero2", "fsdp"} {
			if r := float64(state[shard]) / float64(state["none"]); r < 0.45 || r > 0.55 {
				t.Errorf("%s/%s: state bytes %d vs ddp %d: ratio %.3f, want about 1/2", model, shard, state[shard], state["none"], r)
			}
		}
		if r := float64(params["fsdp"]) / float64(params["none"]); r < 0.45 || r > 0.55 {
			t.Errorf("%s/fsdp: param bytes %d vs ddp %d: ratio %.3f, want about 1/2", model, params["fsdp"], params["none"], r)
		}
	}
}

// TestShardSpeed measures samples/s of ddp, zero1, zero2 and fsdp at world
// 2 over the in-process transport (goroutines, one process), the modes
// interleaved over three rounds, and reports each mode's median. Set
// COHORT_SHARD_BENCH=1 to run it (a minute or two).
func TestShardSpeed(t *testing.T) {
	if os.Getenv("COHORT_SHARD_BENCH") == "" {
		t.Skip("set COHORT_SHARD_BENCH=1 to measure")
	}
	modes := []string{"none", "zero1", "zero2", "fsdp"}
	for _, model := range []string{"mlp", "gpt"} {
		runs := map[string][]shardResult{}
		for range 3 {
			for _, shard := range modes {
				s := shardSpec{Model: model, Shard: shard, Warmup: 3, Steps: 15}
				distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
					r, err := shardTrainRun(context.Background(), s, pg)
					if err != nil {
						t.Fatalf("rank %d: %v", pg.Rank(), err)
					}
					if pg.Rank() == 0 {
						runs[shard] = append(runs[shard], r)
					}
				})
			}
		}
		median := func(rs []shardResult) shardResult {
			slices.SortFunc(rs, func(a, b shardResult) int { return cmp.Compare(a.SamplesPerSec(), b.SamplesPerSec()) })
			return rs[len(rs)/2]
		}
		base := median(runs["none"]).SamplesPerSec()
		b := median(runs["none"])
		baseCPU := b.CPU.Seconds() / float64(b.Samples)
		for _, shard := range modes {
			r := median(runs[shard])
			var out strings.Builder
			printShardTrain(&out, shardSpec{Model: model, Shard: shard, Warmup: 3, Steps: 15}, 2, r)
			fmt.Printf("%s(%.2f× ddp, median of 3; cpu %.3f ms/sample, %.2f× ddp's)\n", out.String(), r.SamplesPerSec()/base,
				1e3*r.CPU.Seconds()/float64(r.Samples), (r.CPU.Seconds()/float64(r.Samples))/baseCPU)
		}
	}
}

// TestParseShardFlag: --shard reaches the spec (and the workers' flags);
// a bad mode, or one without a process group, is a usage error.
func TestParseShardFlag(t *testing.T) {
	for _, shard := range []string{"none", "zero1", "zero2", "fsdp"} {
		t.Run("ok/"+shard, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd, code := parseBenchTrain([]string{"--model", "gpt", "--world", "2", "--shard", shard}, &stderr)
			if code != -1 || cmd.spec.shard != shard {
				t.Fatalf("exit code %d, spec %+v, stderr %q; want --shard %s accepted", code, cmd.spec, stderr.String(), shard)
			}
			args := cmd.spec.workerArgs("r.json")
			if i := slices.Index(args, "--shard"); i < 0 || args[i+1] != shard {
				t.Errorf("worker flags %q do not pass --shard %s", args, shard)
			}
			if s := cmd.spec.shardSpec(); s.Model != "gpt" || s.Shard != shard || s.Steps != 100 || s.Warmup != 10 || s.batch() != 32 {
				t.Errorf("shard spec %+v (batch %d), want gpt, %s, 100 + 10 steps, batch 32", s, s.batch(), shard)
			}
		})
	}
	for name, args := range map[string][]string{
		"unknown mode": {"--shard", "zero3"},
		"no ddp":       {"--shard", "zero1", "--ddp=false"},
	} {
		t.Run("bad/"+name, func(t *testing.T) {
			var stderr bytes.Buffer
			if _, code := parseBenchTrain(args, &stderr); code != 2 || !strings.Contains(stderr.String(), "--shard") {
				t.Errorf("parseBenchTrain(%q): exit code %d, stderr %q; want 2 and a message naming --shard", args, code, stderr.String())
			}
		})
	}
}

// TestSpawnShardTrain runs `cohort bench train --shard` as two real worker
// processes under the launcher and checks the report (text and JSON).
func TestSpawnShardTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	for _, shard := range []string{"zero2", "fsdp"} {
		t.Run("mlp/world=2/"+shard, func(t *testing.T) {
			s := trainSpec{model: "mlp", world: 2, ddp: true, view: true, transport: "auto", threads: 1, steps: 2, warmup: 1, shard: shard}
			r := spawnWorkers(t, s)
			var rep, js bytes.Buffer
			if err := printShardReport(&rep, s, r, false); err != nil {
				t.Fatal(err)
			}
			m := shardLine.FindStringSubmatch(rep.String())
			if m == nil || m[1] != "mlp" || m[2] != "2" || m[3] != shard {
				t.Fatalf("report does not end in the train: line for mlp world 2 shard %s:\n%s", shard, rep.String())
			}
			// AdamW state of half of the MLP's 1,863,690 parameters: 8 bytes each.
			if state, _ := strconv.ParseInt(m[5], 10, 64); state < 7_400_000 || state > 7_600_000 {
				t.Errorf("state bytes/rank %d, want about 8·1,863,690/2", state)
			}
			if err := printShardReport(&js, s, r, true); err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(js.Bytes(), &rec); err != nil || rec["mode"] != shard || rec["samples_per_s"].(float64) <= 0 {
				t.Errorf("JSON report %q (%v): want mode %s and samples_per_s", js.String(), err, shard)
			}
		})
	}
}
