#!/usr/bin/env bash
# vs_pytorch.sh: single-process training throughput of cohort against the
# PyTorch anchor, run alternately on the same machine.
#
#   bench/vs_pytorch.sh ANCHORS_DIR        (or COHORT_ANCHORS=ANCHORS_DIR bench/vs_pytorch.sh)
#
# ANCHORS_DIR holds the PyTorch anchor scripts (ddp_mlp_bench.py and the
# cpuload.py it imports). For each model and thread count the script runs
# `cohort bench train` and `ddp_mlp_bench.py` (world 1, no DDP) one after
# the other, REPEATS times, and prints every run, then the medians and the
# ratio cohort/pytorch. Both sides run the same workload: 60000 synthetic
# MNIST-shaped samples (seed 1234), batch 64, SGD lr 0.01 momentum 0.9,
# WARMUP warm-up steps and STEPS timed steps, data loading included.
#
# Environment (defaults in brackets):
#   PYTHON   [/usr/bin/python3]  a Python with torch
#   MODELS   [mlp cnn]
#   THREADS  [1]                 e.g. "1 2"; PyTorch's 2-thread runs use
#                                OMP_WAIT_POLICY=PASSIVE, its faster setting
#   REPEATS  [3]
#   STEPS    [200]
#   WARMUP   [20]
#
# It exits 0 after printing a reason, without measuring, when the anchors
# directory or torch is missing.
set -euo pipefail

anchors="${1:-${COHORT_ANCHORS:-}}"
python="${PYTHON:-/usr/bin/python3}"
models="${MODELS:-mlp cnn}"
threads_list="${THREADS:-1}"
repeats="${REPEATS:-3}"
steps="${STEPS:-200}"
warmup="${WARMUP:-20}"

if [[ -z "$anchors" ]]; then
	echo "vs_pytorch: skipped: no anchors directory (pass it as the argument or set COHORT_ANCHORS)"
	exit 0
fi
if [[ ! -f "$anchors/ddp_mlp_bench.py" ]]; then
	echo "vs_pytorch: skipped: $anchors/ddp_mlp_bench.py not found"
	exit 0
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "vs_pytorch: skipped: '$python -c \"import torch\"' fails (set PYTHON to a Python with torch)"
	exit 0
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/cohort" ./cmd/cohort)

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print v[(NR+1)/2]} else {print (v[NR/2]+v[NR/2+1])/2}}'; }

summary=()
for model in $models; do
	for threads in $threads_list; do
		cfg="$model:1:noddp:$threads"
		if [[ "$threads" -gt 1 ]]; then
			cfg="$cfg:passive"
		fi
		: >"$work/cohort.txt"
		: >"$work/torch.txt"
		for ((r = 1; r <= repeats; r++)); do
			line="$("$work/cohort" bench train --model "$model" --threads "$threads" --steps "$steps" --warmup "$warmup" | tail -n 1)"
			c="$(awk '{print $NF}' <<<"$line")"
			echo "$c" >>"$work/cohort.txt"
			rm -f "$work/torch.jsonl"
			"$python" "$anchors/ddp_mlp_bench.py" --configs "$cfg" --repeats 1 --steps "$steps" --warmup "$warmup" --out "$work/torch.jsonl" >/dev/null
			t="$("$python" -c 'import json,sys; print("%.1f" % json.loads(open(sys.argv[1]).readline())["samples_per_s"])' "$work/torch.jsonl")"
			echo "$t" >>"$work/torch.txt"
			printf 'vs_pytorch: %s threads=%s run %d: cohort %s samples/s, pytorch %s samples/s\n' "$model" "$threads" "$r" "$c" "$t"
		done
		cm="$(median <"$work/cohort.txt")"
		tm="$(median <"$work/torch.txt")"
		ratio="$(awk -v c="$cm" -v t="$tm" 'BEGIN {printf "%.2f", c / t}')"
		summary+=("$(printf 'vs_pytorch: %s threads=%s: cohort %.0f samples/s, pytorch %.0f samples/s, cohort/pytorch %s (medians of %d alternating runs)' "$model" "$threads" "$cm" "$tm" "$ratio" "$repeats")")
	done
done
printf '%s\n' "${summary[@]}"
