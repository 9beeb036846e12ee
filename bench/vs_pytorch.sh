#!/usr/bin/env bash
# vs_pytorch.sh: training throughput of cohort against PyTorch 1.13 (DDP
# over gloo, or the plain loop), run alternately on the same machine.
#
#   bench/vs_pytorch.sh ANCHORS_DIR        (or COHORT_ANCHORS=ANCHORS_DIR bench/vs_pytorch.sh)
#
# ANCHORS_DIR holds the PyTorch anchor scripts (ddp_mlp_bench.py,
# gpt_bench.py with its gpt_mini.py, and the cpuload.py they import). Each
# configuration MODEL:WORLD:MODE[:THREADS] (MODE ddp or noddp, THREADS per
# rank, default 1) runs as `cohort bench train` and as the anchor script
# one after the other, REPEATS rounds over all configurations, so that load
# from other processes hits both sides alike. Both sides run the same
# workload:
#   mlp, cnn  (ddp_mlp_bench.py) 60000 synthetic MNIST-shaped samples (seed
#             1234), DistributedSampler batches of 64 per rank, SGD lr 0.01
#             momentum 0.9, WARMUP warm-up steps, a barrier, STEPS timed
#             steps, a barrier; samples/s = world·64·STEPS / rank 0's wall
#             time.
#   gpt       (gpt_bench.py) GPT-mini on the bytes of Opticks, batches of
#             32×64 tokens per rank, AdamW, clipping at 1.0; GPT_WARMUP
#             warm-up and GPT_STEPS timed steps; tokens/s =
#             world·32·64·GPT_STEPS / rank 0's wall time. World 2 is DDP;
#             MODE must be noddp at world 1 and ddp above.
# PyTorch's multi-thread runs use OMP_WAIT_POLICY=PASSIVE, its faster
# setting. One-thread runs at world 1 pin both sides to one core (taskset
# -c PIN_CPU; cohort also with GOMAXPROCS 1), so that neither side's
# helper threads (Go's garbage collector, PyTorch's intra-op pool) borrow
# a second core; PIN_CPU=none runs them unpinned.
#
# PyTorch multiplies through OpenBLAS, which falls back to its generic
# kernel on CPUs newer than its release (about 3x slower); the script then
# runs with the kernel family the CPU supports, once checked to agree
# (bench/blas_core.sh; it prints what it chose).
#
# It prints every run (with the CPU share other processes used meanwhile,
# "foreign"), then per configuration the medians, the ratio cohort/pytorch
# and, for cohort's DDP runs, the share of gradient communication hidden
# behind backward; then the DDP overhead at world 1 (ddp vs noddp) for
# both. Medians leave out runs with more than MAX_FOREIGN % foreign load
# (all runs are used when none is that quiet). Raw records are kept in
# OUT if set.
#
# Environment (defaults in brackets):
#   PYTHON       [/usr/bin/python3]  a Python with torch
#   COHORT_BIN   []                  a prebuilt cohort binary, run instead of one built
#                                    with go (for a machine without Go; gpt there needs $OPTICKS)
#   CONFIGS      [mlp:1:noddp mlp:1:ddp mlp:2:ddp cnn:1:noddp cnn:1:ddp cnn:2:ddp
#                 gpt:1:noddp gpt:1:noddp:2 gpt:2:ddp]
#   REPEATS      [3]
#   STEPS        [200]
#   WARMUP       [20]
#   GPT_STEPS    [100]
#   GPT_WARMUP   [10]
#   MAX_FOREIGN  [10]
#   BF16_CONFIGS [mlp:1:noddp gpt:1:noddp]  configurations of CONFIGS also run in bf16 ("" for none)
#   SHARD_MODELS []                  models for the sharded-training comparison (mlp, gpt)
#   SHARD_MODES  [none zero2 fsdp]   cohort's --shard modes
#   SHARD_MLP_STEPS [200]  SHARD_MLP_WARMUP [20]  SHARD_GPT_STEPS [30]  SHARD_GPT_WARMUP [5]
#   PIPE_SCHEDULES []                cohort schedules for the pipeline comparison (gpipe 1f1b
#                                    interleaved zb)
#   PIPE_MICROBATCHES [8]  PIPE_STEPS [15]  PIPE_WARMUP [3]
#   COHORT_FLAGS []                  extra flags for cohort bench train, e.g. "--transport tcp"
#   OUT          []                  a JSONL file to append the raw records to
#   PIN_CPU      [the highest CPU this shell may use]  the core one-thread world-1 runs are
#                                    pinned to; "none" leaves them unpinned
#
# Sharded training (SHARD_MODELS, e.g. "mlp gpt"): in every round, for each
# model, `cohort bench train --world 2 --shard S` for each S in SHARD_MODES
# and zero_bench.py's ddp and zero modes (DDP + AdamW, and DDP +
# ZeroRedundancyOptimizer(AdamW)), one after the other. Both sides train
# with AdamW at world 2, 1 thread per rank, batch 64 (mlp) or 32×64
# tokens (gpt) per rank, with SHARD_MLP_STEPS/SHARD_MLP_WARMUP or
# SHARD_GPT_STEPS/SHARD_GPT_WARMUP steps (zero_bench.py's defaults); cohort
# clips at 1.0 for both models and draws random batches (the data path is
# no part of the comparison). It prints each run, then per model the
# median samples/s of each mode with the ratios zero2/none, fsdp/none and
# each cohort mode over PyTorch's ZeroRedundancyOptimizer, and the
# foreign CPU load. CONFIGS="" runs only this part.
#
# Pipeline parallelism (PIPE_SCHEDULES, e.g. "1f1b zb"): in every round,
# `cohort bench pipeline --stages 2` runs its one-stage baseline and then
# each schedule, and pipe_bench.py runs PyTorch's plain model ("nopipe")
# and its hand-written two-process GPipe over gloo ("gpipe2p"), both with
# PIPE_MICROBATCHES microbatches of GPT-mini's 32×64-token batch, one
# thread per process. It prints each run, then the medians: tokens/s,
# each side's speedup over its own one-process run, and cohort's tokens/s
# over PyTorch's GPipe.
#
# bfloat16 (BF16_CONFIGS, the world-1 one-thread noddp configurations of
# mlp and gpt): right after a configuration's fp32 pair, in the same
# round, `cohort bench train --dtype bf16` and bench/anchors/autocast_bench.py
# (the same workload under torch.autocast("cpu", dtype=torch.bfloat16),
# pinned alike) run as the configuration CFG/bf16; the summary adds each
# side's bf16/fp32 ratio. When the cohort binary has no --dtype flag the
# bf16 rows are left out with a printed reason. ONEDNN_MAX_CPU_ISA, when
# set, reaches PyTorch's runs unchanged (AVX512_CORE_AMX lets oneDNN use
# AMX on a CPU that has it).
#
# It exits 0 after printing a reason, without measuring, when the anchors
# directory or torch is missing.
set -euo pipefail

anchors="${1:-${COHORT_ANCHORS:-}}"
python="${PYTHON:-/usr/bin/python3}"
configs="${CONFIGS-mlp:1:noddp mlp:1:ddp mlp:2:ddp cnn:1:noddp cnn:1:ddp cnn:2:ddp gpt:1:noddp gpt:1:noddp:2 gpt:2:ddp}"
repeats="${REPEATS:-3}"
steps="${STEPS:-200}"
warmup="${WARMUP:-20}"
gpt_steps="${GPT_STEPS:-100}"
gpt_warmup="${GPT_WARMUP:-10}"
max_foreign="${MAX_FOREIGN:-10}"
cohort_flags="${COHORT_FLAGS:-}"
shard_models="${SHARD_MODELS:-}"
shard_modes="${SHARD_MODES:-none zero2 fsdp}"
pipe_schedules="${PIPE_SCHEDULES:-}"
pipe_mb="${PIPE_MICROBATCHES:-8}"
pipe_steps="${PIPE_STEPS:-15}"
pipe_warmup="${PIPE_WARMUP:-3}"
bf16_configs="${BF16_CONFIGS-mlp:1:noddp gpt:1:noddp}"

if [[ -z "$anchors" ]]; then
	echo "vs_pytorch: skipped: no anchors directory (pass it as the argument or set COHORT_ANCHORS)"
	exit 0
fi
needed="cpuload.py"
[[ " $configs" == *" mlp:"* || " $configs" == *" cnn:"* ]] && needed="$needed ddp_mlp_bench.py"
[[ " $configs" == *" gpt:"* ]] && needed="$needed gpt_bench.py gpt_mini.py"
[[ -n "$shard_models" ]] && needed="$needed zero_bench.py ddp_mlp_bench.py gpt_mini.py"
[[ -n "$pipe_schedules" ]] && needed="$needed pipe_bench.py gpt_mini.py"
for f in $needed; do
	if [[ ! -f "$anchors/$f" ]]; then
		echo "vs_pytorch: skipped: $anchors/$f not found"
		exit 0
	fi
done
if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "vs_pytorch: skipped: '$python -c \"import torch\"' fails (set PYTHON to a Python with torch)"
	exit 0
fi

pin_cpu="${PIN_CPU:-$("$python" -c 'import os; print(max(os.sched_getaffinity(0)))')}"
if [[ "$pin_cpu" != none ]] && ! command -v taskset >/dev/null; then
	echo "vs_pytorch: taskset not found (Debian: util-linux): one-thread runs are not pinned"
	pin_cpu=none
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=build.sh
source "$root/bench/build.sh"
cohort_build "$root" "$work/cohort"
# shellcheck source=blas_core.sh
source "$root/bench/blas_core.sh"
blas_core "$python" "$work" >"$work/blas.txt"
sed 's/^/vs_pytorch: /' "$work/blas.txt"
train_help="$("$work/cohort" bench train --help 2>&1 || true)"
if [[ -n "$bf16_configs" && "$train_help" != *"-dtype"* ]]; then
	echo "vs_pytorch: bf16 rows skipped: this cohort's 'bench train' has no --dtype flag"
	bf16_configs=""
fi
records="$work/records.jsonl"
shard_records="$work/shard.jsonl"
: >"$records"
: >"$shard_records"
pipe_records="$work/pipe.jsonl"
: >"$pipe_records"

pair_line() {
	"$python" - "$1" <<-'EOF'
		import json, sys
		c, t = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()[-2:]]
		unit = "tokens/s" if c["model"] == "gpt" else "samples/s"
		key = unit.replace("/", "_per_")
		extra = ""
		if "hidden_frac" in c and c["world"] > 1:
		    extra = f", {100*c['hidden_frac']:.0f}% of cohort's communication hidden"
		if c.get("pinned_cpu") is not None:
		    extra += f", both pinned to CPU {c['pinned_cpu']}"
		print(f"vs_pytorch: round {c['round']} {c['config']}: cohort {c[key]:.0f} {unit} (foreign {c['foreign_busy_pct']}%), "
		      f"pytorch {t[key]:.0f} {unit} (foreign {t['foreign_busy_pct']}%){extra}", flush=True)
	EOF
}

for ((r = 1; r <= repeats; r++)); do
	for cfg in $configs; do
		IFS=: read -r model world mode threads <<<"$cfg"
		threads="${threads:-1}"
		ddp=true
		[[ "$mode" == noddp ]] && ddp=false
		nsteps="$steps" nwarmup="$warmup"
		if [[ "$model" == gpt ]]; then
			nsteps="$gpt_steps" nwarmup="$gpt_warmup"
			if [[ "$world" == 1 && "$mode" != noddp ]] || [[ "$world" != 1 && "$mode" != ddp ]]; then
				echo "vs_pytorch: $cfg: gpt_bench.py runs noddp at world 1 and ddp above" >&2
				exit 2
			fi
		fi
		# One thread at world 1: both sides on one core.
		pin=() gmp=0 pinned=null
		if [[ "$world" == 1 && "$threads" == 1 && "$pin_cpu" != none ]]; then
			pin=(taskset -c "$pin_cpu") gmp=1 pinned="$pin_cpu"
		fi
		# cohort: one JSON line; cpuload.py appends the foreign CPU share.
		# shellcheck disable=SC2086
		line="$(cd "$anchors" && "$python" cpuload.py -- "${pin[@]}" "$work/cohort" bench train --json \
			--model "$model" --world "$world" --ddp="$ddp" --threads "$threads" --gomaxprocs "$gmp" \
			--steps "$nsteps" --warmup "$nwarmup" $cohort_flags | tail -n 1)"
		"$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r["config"]=sys.argv[2]; r["round"]=int(sys.argv[3]); r["pinned_cpu"]=json.loads(sys.argv[4]); print(json.dumps(r))' \
			"$line" "$cfg" "$r" "$pinned" >>"$records"
		# PyTorch: the anchor script, one repeat of this configuration.
		rm -f "$work/torch.jsonl"
		if [[ "$model" == gpt ]]; then
			tcfg="$world:$threads"
			[[ "$threads" -gt 1 ]] && tcfg="$tcfg:passive"
			(cd "$anchors" && "${pin[@]}" "$python" gpt_bench.py --configs "$tcfg" --repeats 1 --steps "$nsteps" --warmup "$nwarmup" \
				--curve-seeds --out "$work/torch.jsonl" >/dev/null)
		else
			tcfg="$model:$world:$mode:$threads"
			[[ "$threads" -gt 1 ]] && tcfg="$tcfg:passive"
			"${pin[@]}" "$python" "$anchors/ddp_mlp_bench.py" --configs "$tcfg" --repeats 1 --steps "$steps" --warmup "$warmup" \
				--out "$work/torch.jsonl" >/dev/null
		fi
		"$python" -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); r["impl"]="pytorch"; r["config"]=sys.argv[2]; r["round"]=int(sys.argv[3]); print(json.dumps(r))' \
			"$work/torch.jsonl" "$cfg" "$r" >>"$records"
		pair_line "$records"
		if [[ " $bf16_configs " == *" $cfg "* ]]; then
			# shellcheck disable=SC2086
			line="$(cd "$anchors" && "$python" cpuload.py -- "${pin[@]}" "$work/cohort" bench train --json --dtype bf16 \
				--model "$model" --world 1 --ddp=false --threads 1 --gomaxprocs "$gmp" \
				--steps "$nsteps" --warmup "$nwarmup" $cohort_flags | tail -n 1)"
			"$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r["config"]=sys.argv[2]; r["round"]=int(sys.argv[3]); r["pinned_cpu"]=json.loads(sys.argv[4]); print(json.dumps(r))' \
				"$line" "$cfg/bf16" "$r" "$pinned" >>"$records"
			line="$(cd "$anchors" && "$python" cpuload.py -- "${pin[@]}" "$python" "$root/bench/anchors/autocast_bench.py" --anchors "$anchors" \
				--models "$model" --dtypes bf16 --steps "$nsteps" --warmup "$nwarmup" --gpt-steps "$nsteps" --gpt-warmup "$nwarmup" | tail -n 1)"
			"$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r["impl"]="pytorch"; r["config"]=sys.argv[2]; r["round"]=int(sys.argv[3]); print(json.dumps(r))' \
				"$line" "$cfg/bf16" "$r" >>"$records"
			pair_line "$records"
		fi
	done
	for model in $shard_models; do
		msteps="${SHARD_MLP_STEPS:-200}" mwarmup="${SHARD_MLP_WARMUP:-20}"
		if [[ "$model" == gpt ]]; then
			msteps="${SHARD_GPT_STEPS:-30}" mwarmup="${SHARD_GPT_WARMUP:-5}"
		fi
		for mode in $shard_modes; do
			# shellcheck disable=SC2086
			line="$(cd "$anchors" && "$python" cpuload.py -- "$work/cohort" bench train --json --shard "$mode" \
				--model "$model" --world 2 --threads 1 --steps "$msteps" --warmup "$mwarmup" $cohort_flags | tail -n 1)"
			"$python" - "$line" "$r" >>"$shard_records" <<-'EOF'
				import json, sys
				r = json.loads(sys.argv[1])
				r["round"] = int(sys.argv[2])
				print(json.dumps(r))
				print(f"vs_pytorch: round {r['round']} {r['model']} world 2 cohort --shard {r['mode']}: {r['samples_per_s']:.1f} samples/s, "
				      f"state {r['opt_state_bytes']} B/rank, params {r['param_bytes']} B/rank, peak RSS {r['peak_rss_mib']:.1f} MiB "
				      f"(foreign {r['foreign_busy_pct']}%)", file=sys.stderr, flush=True)
			EOF
		done
		rm -f "$work/torch.jsonl"
		(cd "$anchors" && "$python" zero_bench.py --models "$model" --modes ddp zero --repeats 1 --no-check \
			--mlp-steps "${SHARD_MLP_STEPS:-200}" --mlp-warmup "${SHARD_MLP_WARMUP:-20}" \
			--gpt-steps "${SHARD_GPT_STEPS:-30}" --gpt-warmup "${SHARD_GPT_WARMUP:-5}" --out "$work/torch.jsonl" >/dev/null)
		"$python" - "$work/torch.jsonl" "$r" >>"$shard_records" <<-'EOF'
			import json, sys
			for l in open(sys.argv[1]):
			    t = json.loads(l)
			    t.update({"impl": "pytorch", "round": int(sys.argv[2])})
			    print(json.dumps(t))
			    print(f"vs_pytorch: round {t['round']} {t['model']} world 2 pytorch {t['mode']}: {t['samples_per_s']:.1f} samples/s, "
			          f"state {t['ranks'][0]['opt_state_bytes']} B on rank 0 (foreign {t['foreign_busy_pct']}%)", file=sys.stderr, flush=True)
		EOF
	done
	if [[ -n "$pipe_schedules" ]]; then
		"$work/cohort" bench pipeline --stages 2 --microbatches "$pipe_mb" --schedule "${pipe_schedules// /,}" \
			--rounds 1 --steps "$pipe_steps" --warmup "$pipe_warmup" >"$work/pipe.txt"
		rm -f "$work/torch_pipe.jsonl"
		(cd "$anchors" && "$python" pipe_bench.py --chunks "$pipe_mb" --repeats 1 --steps "$pipe_steps" --warmup "$pipe_warmup" \
			--out "$work/torch_pipe.jsonl" >/dev/null)
		"$python" - "$work/pipe.txt" "$work/torch_pipe.jsonl" "$r" "$pipe_mb" >>"$pipe_records" <<-'EOF'
			import json, re, sys
			text, rnd, mb = open(sys.argv[1]).read(), int(sys.argv[3]), int(sys.argv[4])
			base = float(re.search(r"^round 1: baseline: .*tokens/s (\d+)", text, re.M).group(1))
			recs = [{"impl": "cohort", "mode": "baseline", "tokens_per_s": base}]
			for m in re.finditer(r"^pipeline: schedule (\S+) stages \d+ microbatches \d+ tokens/s (\d+) speedup \S+ ideal (\S+)", text, re.M):
			    recs.append({"impl": "cohort", "mode": m.group(1), "tokens_per_s": float(m.group(2)), "ideal": float(m.group(3))})
			for l in open(sys.argv[2]):
			    t = json.loads(l)
			    if t.get("bench") == "pipe" and t["mode"] == "nopipe":
			        recs.append({"impl": "pytorch", "mode": "baseline", "tokens_per_s": t["tokens_per_s"]})
			    elif t.get("bench") == "gpipe2p" and t["chunks"] == mb:
			        recs.append({"impl": "pytorch", "mode": "gpipe2p", "tokens_per_s": t["tokens_per_s"]})
			for r in recs:
			    r["round"] = rnd
			    print(json.dumps(r))
			    print(f"vs_pytorch: round {rnd} pipeline 2 stages {mb} microbatches: {r['impl']} {r['mode']}: {r['tokens_per_s']:.0f} tokens/s",
			          file=sys.stderr, flush=True)
		EOF
	fi
done
if [[ -n "${OUT:-}" ]]; then
	cat "$records" "$shard_records" "$pipe_records" >>"$OUT"
fi

if [[ -n "$pipe_schedules" ]]; then
	"$python" - "$pipe_records" "$pipe_mb" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
rounds = sorted({r["round"] for r in recs})


def rate(impl, mode, rnd):
    return next(r["tokens_per_s"] for r in recs if (r["impl"], r["mode"], r["round"]) == (impl, mode, rnd))


torch_gpipe = [rate("pytorch", "gpipe2p", k) for k in rounds]
torch_speed = [rate("pytorch", "gpipe2p", k) / rate("pytorch", "baseline", k) for k in rounds]
print(f"vs_pytorch: pipeline 2 stages {sys.argv[2]} microbatches, medians of {len(rounds)} rounds: "
      f"pytorch gpipe2p {med(torch_gpipe):.0f} tokens/s, speedup {med(torch_speed):.2f} over its plain model")
for mode in dict.fromkeys(r["mode"] for r in recs if r["impl"] == "cohort" and r["mode"] != "baseline"):
    c = [rate("cohort", mode, k) for k in rounds]
    sp = [rate("cohort", mode, k) / rate("cohort", "baseline", k) for k in rounds]
    ideal = next(r["ideal"] for r in recs if r["mode"] == mode)
    print(f"vs_pytorch: pipeline cohort {mode}: {med(c):.0f} tokens/s, speedup {med(sp):.2f} over one stage "
          f"({med(sp) / ideal:.2f} of its ideal {ideal:.2f}); over pytorch gpipe2p {med(c) / med(torch_gpipe):.2f}")
EOF
fi

if [[ -n "$shard_models" ]]; then
	"$python" - "$shard_records" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
for model in dict.fromkeys(r["model"] for r in recs):
    rate, load = {}, []
    for r in recs:
        if r["model"] != model:
            continue
        side = ("cohort " if r["impl"] == "cohort" else "pytorch ") + r["mode"]
        rate.setdefault(side, []).append(r["samples_per_s"])
        load.append(r["foreign_busy_pct"])
    m = {k: med(v) for k, v in rate.items()}
    print(f"vs_pytorch: shard {model} world 2, medians of {max(len(v) for v in rate.values())} rounds, samples/s [min..max]: "
          + ", ".join(f"{k} {m[k]:.1f} [{min(v):.1f}..{max(v):.1f}]" for k, v in rate.items()))
    ratios = [f"{a}/ddp {m['cohort ' + a] / m['cohort none']:.2f}" for a in ("zero1", "zero2", "fsdp")
              if "cohort " + a in m and "cohort none" in m]
    if "pytorch zero" in m:
        ratios += [f"cohort {k.split()[1]}/pytorch-zero {m[k] / m['pytorch zero']:.2f}" for k in m if k.startswith("cohort ")]
        if "pytorch ddp" in m:
            ratios.append(f"pytorch zero/ddp {m['pytorch zero'] / m['pytorch ddp']:.2f}")
    print(f"vs_pytorch: shard {model} ratios of medians: " + ", ".join(ratios)
          + f"; foreign CPU load median {med(load):.1f}% (max {max(load):.1f}%)")
EOF
fi
[[ -z "$configs" ]] && exit 0

"$python" - "$records" "$max_foreign" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
max_foreign = float(sys.argv[2])
configs = list(dict.fromkeys(r["config"] for r in recs))
med = statistics.median


def pairs(cfg):
    """The rounds of cfg as (cohort, pytorch) record pairs: those in which
    both sides ran with at most max_foreign % foreign load, or every round
    when there is none."""
    by = {}
    for r in recs:
        if r["config"] == cfg:
            by.setdefault(r["round"], {})[r["impl"]] = r
    ps = [(b["cohort"], b["pytorch"]) for _, b in sorted(by.items()) if len(b) == 2]
    quiet = [p for p in ps if max(p[0]["foreign_busy_pct"], p[1]["foreign_busy_pct"]) <= max_foreign]
    return (quiet, True) if quiet else (ps, False)


rates = {}
for cfg in configs:
    ps, quiet = pairs(cfg)
    c, t = [p[0] for p in ps], [p[1] for p in ps]
    unit = "tokens/s" if cfg.startswith("gpt:") else "samples/s"
    key = unit.replace("/", "_per_")
    cm, tm = med(r[key] for r in c), med(r[key] for r in t)
    rates[cfg] = (cm, tm)
    ratios = [a[key] / b[key] for a, b in ps]
    line = (f"vs_pytorch: {cfg}: cohort {cm:.0f} {unit}, pytorch {tm:.0f} {unit}, cohort/pytorch {cm/tm:.2f} "
            f"(medians of {len(ps)} {'quiet ' if quiet else ''}rounds; per-round ratios {min(ratios):.2f}..{max(ratios):.2f})")
    if c[0]["world"] > 1 and "hidden_frac" in c[0]:
        line += (f"; cohort hides {100*med(r['hidden_frac'] for r in c):.0f}% of its gradient communication "
                 f"(all-reduce {med(r['comm_ms'] for r in c):.2f} ms/step, exposed {med(r['exposed_ms'] for r in c):.2f} ms)")
    if c[0].get("pinned_cpu") is not None:
        line += f"; both sides pinned to CPU {c[0]['pinned_cpu']}, cohort with GOMAXPROCS 1"
    if not quiet:
        line += f" [no round with both sides under {max_foreign:g}% foreign load: all rounds used]"
    print(line)
for cfg in configs:
    base = cfg.removesuffix("/bf16")
    if base != cfg and base in rates:
        (cb, tb), (cf, tf) = rates[cfg], rates[base]
        print(f"vs_pytorch: {base} bf16/fp32 (median rates): cohort {cb/cf:.2f}, pytorch (autocast) {tb/tf:.2f}")
for cfg in configs:
    model, world, mode, *rest = cfg.split(":")
    base = ":".join([model, "1", "noddp"] + rest)
    if world == "1" and mode == "ddp" and base in rates:
        (cd, td), (cn, tn) = rates[cfg], rates[base]
        print(f"vs_pytorch: {model} DDP overhead at world 1 (1 - ddp/noddp median samples/s; negative: ddp measured faster): "
              f"cohort {100*(1-cd/cn):+.1f}%, pytorch {100*(1-td/tn):+.1f}%")
EOF
