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
# setting.
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
#   CONFIGS      [mlp:1:noddp mlp:1:ddp mlp:2:ddp cnn:1:noddp cnn:1:ddp cnn:2:ddp
#                 gpt:1:noddp gpt:1:noddp:2 gpt:2:ddp]
#   REPEATS      [3]
#   STEPS        [200]
#   WARMUP       [20]
#   GPT_STEPS    [100]
#   GPT_WARMUP   [10]
#   MAX_FOREIGN  [10]
#   COHORT_FLAGS []                  extra flags for cohort bench train, e.g. "--transport tcp"
#   OUT          []                  a JSONL file to append the raw records to
#
# It exits 0 after printing a reason, without measuring, when the anchors
# directory or torch is missing.
set -euo pipefail

anchors="${1:-${COHORT_ANCHORS:-}}"
python="${PYTHON:-/usr/bin/python3}"
configs="${CONFIGS:-mlp:1:noddp mlp:1:ddp mlp:2:ddp cnn:1:noddp cnn:1:ddp cnn:2:ddp gpt:1:noddp gpt:1:noddp:2 gpt:2:ddp}"
repeats="${REPEATS:-3}"
steps="${STEPS:-200}"
warmup="${WARMUP:-20}"
gpt_steps="${GPT_STEPS:-100}"
gpt_warmup="${GPT_WARMUP:-10}"
max_foreign="${MAX_FOREIGN:-10}"
cohort_flags="${COHORT_FLAGS:-}"

if [[ -z "$anchors" ]]; then
	echo "vs_pytorch: skipped: no anchors directory (pass it as the argument or set COHORT_ANCHORS)"
	exit 0
fi
needed="cpuload.py"
[[ " $configs" == *" mlp:"* || " $configs" == *" cnn:"* ]] && needed="$needed ddp_mlp_bench.py"
[[ " $configs" == *" gpt:"* ]] && needed="$needed gpt_bench.py gpt_mini.py"
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

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/cohort" ./cmd/cohort)
records="$work/records.jsonl"
: >"$records"

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
		# cohort: one JSON line; cpuload.py appends the foreign CPU share.
		# shellcheck disable=SC2086
		line="$(cd "$anchors" && "$python" cpuload.py -- "$work/cohort" bench train --json \
			--model "$model" --world "$world" --ddp="$ddp" --threads "$threads" \
			--steps "$nsteps" --warmup "$nwarmup" $cohort_flags | tail -n 1)"
		"$python" -c 'import json,sys; r=json.loads(sys.argv[1]); r["config"]=sys.argv[2]; r["round"]=int(sys.argv[3]); print(json.dumps(r))' \
			"$line" "$cfg" "$r" >>"$records"
		# PyTorch: the anchor script, one repeat of this configuration.
		rm -f "$work/torch.jsonl"
		if [[ "$model" == gpt ]]; then
			tcfg="$world:$threads"
			[[ "$threads" -gt 1 ]] && tcfg="$tcfg:passive"
			(cd "$anchors" && "$python" gpt_bench.py --configs "$tcfg" --repeats 1 --steps "$nsteps" --warmup "$nwarmup" \
				--curve-seeds --out "$work/torch.jsonl" >/dev/null)
		else
			tcfg="$model:$world:$mode:$threads"
			[[ "$threads" -gt 1 ]] && tcfg="$tcfg:passive"
			"$python" "$anchors/ddp_mlp_bench.py" --configs "$tcfg" --repeats 1 --steps "$steps" --warmup "$warmup" \
				--out "$work/torch.jsonl" >/dev/null
		fi
		"$python" -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); r["impl"]="pytorch"; r["config"]=sys.argv[2]; r["round"]=int(sys.argv[3]); print(json.dumps(r))' \
			"$work/torch.jsonl" "$cfg" "$r" >>"$records"
		"$python" - "$records" <<-'EOF'
			import json, sys
			c, t = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()[-2:]]
			unit = "tokens/s" if c["model"] == "gpt" else "samples/s"
			key = unit.replace("/", "_per_")
			extra = ""
			if "hidden_frac" in c and c["world"] > 1:
			    extra = f", {100*c['hidden_frac']:.0f}% of cohort's communication hidden"
			print(f"vs_pytorch: round {c['round']} {c['config']}: cohort {c[key]:.0f} {unit} (foreign {c['foreign_busy_pct']}%), "
			      f"pytorch {t[key]:.0f} {unit} (foreign {t['foreign_busy_pct']}%){extra}", flush=True)
		EOF
	done
done
if [[ -n "${OUT:-}" ]]; then
	cat "$records" >>"$OUT"
fi

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
    if not quiet:
        line += f" [no round with both sides under {max_foreign:g}% foreign load: all rounds used]"
    print(line)
for cfg in configs:
    model, world, mode, *rest = cfg.split(":")
    base = ":".join([model, "1", "noddp"] + rest)
    if world == "1" and mode == "ddp" and base in rates:
        (cd, td), (cn, tn) = rates[cfg], rates[base]
        print(f"vs_pytorch: {model} DDP overhead at world 1 (1 - ddp/noddp median samples/s; negative: ddp measured faster): "
              f"cohort {100*(1-cd/cn):+.1f}%, pytorch {100*(1-td/tn):+.1f}%")
EOF
