#!/usr/bin/env bash
# vs_gloo.sh: cohort's all-reduce (and, at one size, broadcast and
# all-gather) against the Gloo anchor (PyTorch's torch.distributed) and,
# when OpenMPI is installed, the MPI all-reduce anchor, run alternately on
# the same machine.
#
#   bench/vs_gloo.sh ANCHORS_DIR        (or COHORT_ANCHORS=ANCHORS_DIR bench/vs_gloo.sh)
#
# ANCHORS_DIR holds allreduce_bench.py (and the cpuload.py it imports) and
# mpi_allreduce.c. For each world size and repeat the script runs
# `cohort bench allreduce` once per transport, then the Gloo anchor, then
# MPI over shared memory and over TCP, so that load from other tenants
# hits every side alike. It prints every run, then per size the medians and
# the ratios: speed-up = other's time / cohort's time, and busbw ratio =
# cohort's busbw / other's. All use the same method (float32 SUM in place,
# warm-up, ~BUDGET s of individually timed iterations, element-wise max
# over ranks, median).
#
# Environment (defaults in brackets):
#   PYTHON      [/usr/bin/python3]  a Python with torch
#   COHORT_BIN  []                  a prebuilt cohort binary, run instead of one built
#                                   with go (for a machine without Go)
#   WORLDS      [2 4]
#   TRANSPORTS  [shm tcp]           cohort transports to measure
#   SIZES       [4096 65536 1048576 16777216 67108864]  bytes
#   REPEATS     [3]
#   BUDGET      [1.0]               seconds of timed loop per size
#   EXTRA       [16777216]          bytes for broadcast and all-gather (0 skips them)
#
# Without an anchors directory or without torch it measures cohort alone
# and says why the comparison is skipped; without mpirun/mpicc it skips MPI.
set -euo pipefail

anchors="${1:-${COHORT_ANCHORS:-}}"
python="${PYTHON:-/usr/bin/python3}"
worlds="${WORLDS:-2 4}"
transports="${TRANSPORTS:-shm tcp}"
sizes="${SIZES:-4096 65536 1048576 16777216 67108864}"
repeats="${REPEATS:-3}"
budget="${BUDGET:-1.0}"
extra="${EXTRA:-16777216}"

gloo=1
if [[ -z "$anchors" ]]; then
	echo "vs_gloo: Gloo/MPI comparison skipped: no anchors directory (pass it as the argument or set COHORT_ANCHORS)"
	gloo=0
elif [[ ! -f "$anchors/allreduce_bench.py" ]]; then
	echo "vs_gloo: Gloo comparison skipped: $anchors/allreduce_bench.py not found"
	gloo=0
elif ! "$python" -c 'import torch' 2>/dev/null; then
	echo "vs_gloo: Gloo comparison skipped: '$python -c \"import torch\"' fails (set PYTHON to a Python with torch)"
	gloo=0
fi
mpi=0
if [[ -n "$anchors" && -f "$anchors/mpi_allreduce.c" ]]; then
	if command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
		mpi=1
	else
		echo "vs_gloo: MPI comparison skipped: mpirun or mpicc not found"
	fi
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=build.sh
source "$root/bench/build.sh"
cohort_build "$root" "$work/cohort"
if [[ $mpi == 1 ]]; then
	mpicc -O2 -o "$work/mpi_allreduce" "$anchors/mpi_allreduce.c"
fi
csv_sizes="$(tr ' ' ',' <<<"$sizes")"
: >"$work/all.jsonl"

for world in $worlds; do
	for ((r = 1; r <= repeats; r++)); do
		for tr in $transports; do
			"$work/cohort" bench allreduce --world "$world" --transport "$tr" --sizes "$csv_sizes" \
				--budget "${budget}s" --json "$work/cohort.jsonl" | tail -n 1 | sed "s/^/vs_gloo: run $r cohort-$tr: /"
			if [[ "$extra" != 0 ]]; then
				for op in broadcast allgather; do
					"$work/cohort" bench "$op" --world "$world" --transport "$tr" --sizes "$extra" \
						--budget "${budget}s" --json "$work/cohort.jsonl" | tail -n 1 | sed "s/^/vs_gloo: run $r cohort-$tr: /"
				done
			fi
		done
		if [[ $gloo == 1 ]]; then
			rm -f "$work/gloo.jsonl"
			(cd "$anchors" && "$python" allreduce_bench.py --worlds "$world" --repeats 1 --extra-bytes "$extra" \
				--sizes $sizes --budget-s "$budget" --out "$work/gloo.jsonl" >/dev/null)
			"$python" - "$work/gloo.jsonl" "$r" <<-'EOF' | tee -a "$work/all.jsonl" | sed -n 's/.*"line": "\(.*\)"}$/\1/p'
				import json, sys
				for l in open(sys.argv[1]):
				    rec = json.loads(l)
				    for x in rec["results"]:
				        op = x["op"].replace("_", "")
				        line = "vs_gloo: run %s gloo: %s world %d %d B %.1f us %.3f GB/s busbw" % (sys.argv[2], op, x["world"], x["bytes"], x["time_s"] * 1e6, x["busbw_GBps"])
				        print(json.dumps({"impl": "gloo", "op": op, "world": x["world"], "bytes": x["bytes"], "time_s": x["time_s"], "busbw": x["busbw_GBps"], "line": line}))
			EOF
		fi
		if [[ $mpi == 1 ]]; then
			for btl in vader tcp; do
				mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 \
					--mca oob_tcp_if_include lo --mca btl_tcp_if_include lo --mca btl "self,$btl" \
					-np "$world" "$work/mpi_allreduce" "$budget" "$btl" $sizes >"$work/mpi.jsonl"
				"$python" - "$work/mpi.jsonl" "$r" "$btl" <<-'EOF' | tee -a "$work/all.jsonl" | sed -n 's/.*"line": "\(.*\)"}$/\1/p'
					import json, sys
					for l in open(sys.argv[1]):
					    x = json.loads(l)
					    impl = "mpi-" + ("shm" if sys.argv[3] == "vader" else "tcp")
					    line = "vs_gloo: run %s %s: world %d %d B %.1f us %.3f GB/s busbw" % (sys.argv[2], impl, x["world"], x["bytes"], x["time_s"] * 1e6, x["busbw_GBps"])
					    print(json.dumps({"impl": impl, "op": "allreduce", "world": x["world"], "bytes": x["bytes"], "time_s": x["time_s"], "busbw": x["busbw_GBps"], "line": line}))
				EOF
			done
		fi
	done
done

if [[ $gloo == 0 && $mpi == 0 ]]; then
	exit 0
fi
"$python" - "$work/cohort.jsonl" "$work/all.jsonl" <<-'EOF'
	import json, statistics, sys
	rows = {}
	for l in open(sys.argv[1]):
	    x = json.loads(l)
	    rows.setdefault(("cohort-" + x["transport"], x["op"], x["world"], x["bytes"]), []).append((x["time_s"], x["busbw_GBps"]))
	for l in open(sys.argv[2]):
	    x = json.loads(l)
	    rows.setdefault((x["impl"], x["op"], x["world"], x["bytes"]), []).append((x["time_s"], x["busbw"]))
	med = {k: (statistics.median(t for t, _ in v), statistics.median(b for _, b in v), len(v)) for k, v in rows.items()}
	ours = sorted({k[0] for k in med if k[0].startswith("cohort-")})
	others = [i for i in ("gloo", "mpi-shm", "mpi-tcp") if any(k[0] == i for k in med)]
	print()
	print("vs_gloo: medians; speed-up = other time / cohort time, busbw ratio = cohort / other")
	for op in ("allreduce", "broadcast", "allgather"):
	    for world in sorted({k[2] for k in med if k[1] == op}):
	        for size in sorted({k[3] for k in med if k[1] == op and k[2] == world}):
	            for o in ours:
	                if (o, op, world, size) not in med:
	                    continue
	                t, b, n = med[(o, op, world, size)]
	                parts = ["vs_gloo: %s world %d %9d B %-10s %10.1f us %7.3f GB/s (n=%d)" % (op, world, size, o, t * 1e6, b, n)]
	                for other in others:
	                    if (other, op, world, size) in med:
	                        ot, ob, _ = med[(other, op, world, size)]
	                        parts.append("%s %.1f us %.3f GB/s: speed-up %.2fx, busbw %.2fx" % (other, ot * 1e6, ob, ot / t, b / ob if ob else float("nan")))
	                print(" | ".join(parts))
EOF
