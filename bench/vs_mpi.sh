#!/usr/bin/env bash
# vs_mpi.sh: cohort's all-reduce against OpenMPI's MPI_Allreduce on the same
# machine, side by side, in alternating rounds.
#
#   bench/vs_mpi.sh
#
# Each round, for each world size, runs in turn `cohort bench allreduce`
# over shared memory, MPI over shared memory (btl vader), cohort over TCP
# and MPI over TCP (btl tcp on loopback), with the sizes in an order
# shuffled afresh for every run (the same order for all four), so that
# neither load from other tenants nor a size's place in the run (the first
# size meets cold memory) favours one side. Both sides measure alike
# (bench/anchors/mpi_allreduce.c follows collbench): float32 SUM in place, warm-up,
# ~BUDGET s of individually timed ops, element-wise max over ranks, median;
# and the first op of each size on a fresh buffer, timed alone ("first").
#
# It prints every run, then per world and size the medians over rounds and
# the ratios cohort/MPI of time and of busbw, and checks the goals of
# issue 12 (shared memory, world 2: 4 KiB within 1.2x MPI's time, 16 MiB
# busbw at least MPI's, no size slower than a larger one; world 4: no
# slower than MPI), printing "short" for each one missed. It exits non-zero
# if any result check fails (a wrong sum, from either side), or, with
# STRICT=1, if a goal is missed.
#
# Environment (defaults in brackets):
#   WORLDS      [2 4]
#   SIZES       [4096 65536 1048576 16777216 67108864]  bytes
#   ROUNDS      [3]
#   BUDGET      [0.5]            seconds of timed loop per size
#   TRANSPORTS  [shm tcp]        cohort transports (MPI btls: vader, tcp); "mpi" is
#                                cohort's MPI backend (`--backend mpi`), set against
#                                MPI over vader: the cost of the Go binding per op
#   SEED        [12]             for the size order
#   STRICT      [0]
#   PYTHON      [python3]        any Python 3 (for shuffling and the summary)
#   COHORT_BIN  []               a prebuilt cohort binary, run instead of one built
#                                with go (for a machine without Go)
#   BASELINE    []               another cohort checkout (say, the last commit's,
#                                from git worktree or git archive): measured in the
#                                same rounds, right before this one, as "base-*"
#
# Without mpirun or mpicc (Debian: openmpi-bin, libopenmpi-dev) it measures
# cohort alone and says why MPI is skipped.
set -euo pipefail

worlds="${WORLDS:-2 4}"
sizes="${SIZES:-4096 65536 1048576 16777216 67108864}"
rounds="${ROUNDS:-3}"
budget="${BUDGET:-0.5}"
transports="${TRANSPORTS:-shm tcp}"
seed="${SEED:-12}"
strict="${STRICT:-0}"
python="${PYTHON:-python3}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=cpuinfo.sh
source "$root/bench/cpuinfo.sh"
cpu_info vs_mpi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mpi=1
if ! command -v mpirun >/dev/null; then
	echo "vs_mpi: MPI skipped: mpirun not found (Debian: apt-get install openmpi-bin)"
	mpi=0
elif ! command -v mpicc >/dev/null; then
	echo "vs_mpi: MPI skipped: mpicc not found (Debian: apt-get install libopenmpi-dev)"
	mpi=0
fi

echo "vs_mpi: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), CPU family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs available; load at start:$(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck source=build.sh
source "$root/bench/build.sh"
cohort_build "$root" "$work/cohort"
baseline="${BASELINE:-}"
if [[ -n "$baseline" ]]; then
	(cd "$baseline" && go build -o "$work/cohort-base" ./cmd/cohort)
	echo "vs_mpi: baseline: $baseline"
fi
if [[ $mpi == 1 ]]; then
	mpicc -O2 -o "$work/mpi_allreduce" "$root/bench/anchors/mpi_allreduce.c"
	echo "vs_mpi: $(mpirun --version 2>&1 | head -n 1)"
fi
: >"$work/all.jsonl"
failed=0

# order prints the sizes shuffled for run $1 (deterministic in SEED).
order() {
	"$python" -c 'import random, sys; s = sys.argv[2].split(); random.Random(sys.argv[1]).shuffle(s); print(" ".join(s))' "$seed-$1" "$sizes"
}

run_cohort() { # world transport sizes round [base]
	local csv name=cohort bin="$work/cohort"
	csv="$(tr ' ' ',' <<<"$3")"
	if [[ -n "${5:-}" ]]; then
		name=base bin="$work/cohort-base"
	fi
	local how=(--transport "$2")
	[[ $2 == mpi ]] && how=(--backend mpi) # cohort's MPI backend: the same MPI under Go
	if ! "$bin" bench allreduce --world "$1" "${how[@]}" --sizes "$csv" \
		--budget "${budget}s" --json "$work/$name.jsonl" >"$work/out.txt" 2>&1; then
		echo "vs_mpi: round $4 $name-$2 world $1 FAILED:"
		sed 's/^/    /' "$work/out.txt"
		failed=1
		return
	fi
	grep -v -e "^#" -e "^allreduce:" "$work/out.txt" | sed "s/^/vs_mpi: round $4 $name-$2 world $1: /"
}

run_mpi() { # world btl sizes round
	local label="$2"
	[[ $2 == vader ]] && label=shm
	if ! mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 \
		--mca oob_tcp_if_include lo --mca btl_tcp_if_include lo --mca btl "self,$2" \
		-np "$1" "$work/mpi_allreduce" "$budget" "$label" $3 >"$work/mpi.jsonl" 2>"$work/mpi.err"; then
		echo "vs_mpi: round $4 mpi-$label world $1 FAILED:"
		sed 's/^/    /' "$work/mpi.err"
		failed=1
		return
	fi
	grep '^{' "$work/mpi.jsonl" | tee -a "$work/all.jsonl" | "$python" -c '
import json, sys
for l in sys.stdin:
    x = json.loads(l)
    print("vs_mpi: round %s %s world %d: %10d B %10.1f us first %10.1f us %8.3f GB/s busbw %s" % (
        sys.argv[1], x["impl"], x["world"], x["bytes"], x["time_s"] * 1e6, x["first_s"] * 1e6,
        x["busbw_GBps"], "ok" if x["ok"] else "FAIL"))
' "$4"
}

run=0
for ((r = 1; r <= rounds; r++)); do
	for world in $worlds; do
		run=$((run + 1))
		ord="$(order "$run")"
		echo "vs_mpi: round $r world $world sizes: $ord"
		for tr in $transports; do
			if [[ -n "$baseline" ]]; then
				run_cohort "$world" "$tr" "$ord" "$r" base
			fi
			run_cohort "$world" "$tr" "$ord" "$r"
			if [[ $mpi == 1 ]]; then
				btl=$tr
				[[ $tr == shm || $tr == mpi ]] && btl=vader
				run_mpi "$world" "$btl" "$ord" "$r"
			fi
		done
	done
done
echo "vs_mpi: load at end:$(cut -d' ' -f1-3 /proc/loadavg)"

touch "$work/cohort.jsonl" "$work/base.jsonl"
set +e
"$python" - "$work/cohort.jsonl" "$work/all.jsonl" "$strict" "$work/base.jsonl" <<-'EOF'
	import json, statistics, sys
	rows = {}
	bad = 0
	for path, name in ((sys.argv[1], "cohort-"), (sys.argv[4], "base-")):
	    for l in open(path):
	        x = json.loads(l)
	        bad += not x["ok"]
	        rows.setdefault((name + x["transport"], x["world"], x["bytes"]), []).append(x)
	for l in open(sys.argv[2]):
	    x = json.loads(l)
	    bad += not x["ok"]
	    rows.setdefault((x["impl"], x["world"], x["bytes"]), []).append(x)
	med = {k: {f: statistics.median(x[f] for x in v) for f in ("time_s", "first_s", "busbw_GBps")} | {"n": len(v)}
	       for k, v in rows.items()}
	print()
	print("vs_mpi: medians over rounds; time ratio = cohort / MPI (lower is better), busbw ratio = cohort / MPI")
	print("vs_mpi: %-10s %5s %10s %11s %12s %9s %11s %12s %9s" % ("impl", "world", "bytes", "time(us)", "first(us)", "busbw", "MPI(us)", "time ratio", "busbw r."))
	short = []
	for world in sorted({k[1] for k in med}):
	    for impl in sorted({k[0] for k in med if k[0].startswith(("cohort-", "base-")) and k[1] == world}):
	        other = "mpi-" + impl.split("-", 1)[1].replace("mpi", "shm")  # cohort-mpi runs over MPI's shm
	        sizes = sorted(k[2] for k in med if k[0] == impl and k[1] == world)
	        for size in sizes:
	            c = med[(impl, world, size)]
	            o = med.get((other, world, size))
	            line = "vs_mpi: %-10s %5d %10d %11.1f %12.1f %9.3f" % (impl, world, size, c["time_s"] * 1e6, c["first_s"] * 1e6, c["busbw_GBps"])
	            if o:
	                line += " %11.1f %11.2fx %8.2fx" % (o["time_s"] * 1e6, c["time_s"] / o["time_s"], c["busbw_GBps"] / o["busbw_GBps"] if o["busbw_GBps"] else float("nan"))
	            print(line + "   (n=%d)" % c["n"])
	            if impl.startswith("base-"):
	                continue  # goals are checked for this checkout only
	            # A message size slower than a larger one (per byte, not per op: times).
	            for big in sizes:
	                if big > size and med[(impl, world, big)]["time_s"] < c["time_s"]:
	                    short.append("%s world %d: %d B takes longer than %d B" % (impl, world, size, big))
	            if impl != "cohort-shm" or not o:
	                continue
	            if world == 2 and size == 4096 and c["time_s"] > 1.2 * o["time_s"]:
	                short.append("shm world 2: 4 KiB %.1f us > 1.2x MPI's %.1f us" % (c["time_s"] * 1e6, o["time_s"] * 1e6))
	            if world == 2 and size == 16 << 20 and c["busbw_GBps"] < o["busbw_GBps"]:
	                short.append("shm world 2: 16 MiB busbw %.2f GB/s < MPI's %.2f" % (c["busbw_GBps"], o["busbw_GBps"]))
	            if world > 2 and c["time_s"] > o["time_s"]:
	                short.append("shm world %d: %d B %.1f us slower than MPI's %.1f us" % (world, size, c["time_s"] * 1e6, o["time_s"] * 1e6))
	print()
	for s in short:
	    print("vs_mpi: short of the goal:", s)
	if not short:
	    print("vs_mpi: every goal met")
	if bad:
	    print("vs_mpi: %d result check(s) FAILED (a wrong sum)" % bad)
	    sys.exit(1)
	sys.exit(2 if short and sys.argv[3] == "1" else 0)
EOF
status=$?
set -e
if [[ $failed == 1 ]]; then
	echo "vs_mpi: a run failed (see above)"
	exit 1
fi
exit $status
