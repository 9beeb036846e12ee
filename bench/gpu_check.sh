#!/usr/bin/env bash
# gpu_check.sh: the checks that need an NVIDIA GPU, run from the repository
# root on a GPU machine that has no Go toolchain (CUDA from pip's nvidia-*
# wheels in a virtual environment, PyTorch beside them). It runs prebuilt
# binaries carried to the machine, built by bench/gpu_build.sh:
#
#   bin/cohort       CGO_ENABLED=0 go build -o bin/cohort ./cmd/cohort
#   bin/gpt          CGO_ENABLED=0 go build -o bin/gpt ./examples/gpt
#   bin/opticks.txt  cp "$(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt" bin/opticks.txt
#   bin/<pkg>.test   one per package with GPU tests, built by
#                    for p in cuda nvrtc cublas alloc cudatensor nccl; do
#                      CGO_ENABLED=0 go test -c -o bin/$p.test ./device/$p
#                    done
#                    CGO_ENABLED=0 go test -c -o bin/ncclbackend.test ./distributed/backend/nccl
#
# Each test binary runs in its package's directory with -test.v and a
# filter selecting its GPU tests (named TestGPU…; without a device they
# skip, so a skip here is reported, not passed over). NVRTC's and cuBLAS's
# host tests run too: on this machine they exercise the wheels' libraries
# (CUDA 13), not Debian's. COHORT_CUDA_LIB_DIR is set to the wheels'
# library directories when it is not set already.
#
# Logs and figures go to $OUT (default ./gpu_check_out): one <step>.log
# each, summary.tsv, and the table printed last. Every step has its own
# timeout, cut to what is left of a 400 s budget (GPU_CHECK_BUDGET), so
# the whole script stays under 7 minutes. The exit status is 1
# when a step failed or skipped.
#
# cudatensor runs tensor's conformance suite on cuda:0 (every op against
# its CPU twin, fp32 within 1e-5 with TF32 off), the MLP and GPT-mini
# trained 5 steps against the CPU, and the allocator's peak for a GPT-mini
# step. gemm times `cohort bench gemm --device cuda --n 4096` beside the
# PyTorch anchor (bench/anchors/gpt2_bench.py --gemm 4096, fp32 and bf16)
# and passes when cohort's bf16 rate is at least 0.95 of torch.matmul's.
#
# gpt trains GPT-mini for 300 steps with `bin/gpt -device cuda` and passes
# when its final val loss is within 0.02 of the CPU run's 2.4157.
#
# nccl loads libnccl from the wheels; ncclbackend runs the NCCL backend's
# conformance suite at world 1 and its device all-reduce; bench_nccl times
# `cohort bench allreduce --backend nccl --world 1` (host buffers staged
# through the GPU). NCCL at world 2+ needs a machine with several GPUs (the
# same test binary under `bin/cohort run --nproc-per-node N`; not wired).
#
# Data parallelism on device tensors, the backend choice and the GPU
# assignment (ncclbackend's and cudatensor's tests, and run_gpu):
#   - TestGPUInitPicksNCCL: Init on cuda:0 naming no backend gets nccl;
#   - TestGPUTensorCollectives: AllReduceTensor (Sum, Avg) and
#     BroadcastTensor of a CUDA tensor of 2^20+3 floats through NCCL on the
#     tensor's own memory, ordered after the compute stream that wrote it;
#   - TestGPUDDPWorld1: ddp over nccl with a small GPT on cuda:0 (buckets
#     on the device, gradients views of them) equals the CPU without ddp
#     within 1e-4 after 5 AdamW steps with clipping;
#   - TestGPUOpenLocalRank: -device cuda opens LOCAL_RANK's GPU, and a
#     local rank beyond the visible GPUs is refused;
#   - run_gpu: `cohort run --nproc-per-node gpu` starts one worker per GPU
#     nvidia-smi lists, each training GPT-mini 10 steps on -device cuda,
#     and with CUDA_VISIBLE_DEVICES empty it refuses with the driver's
#     line instead of starting anything.
# With one GPU these cannot show: an all-reduce of device buckets between
# two ranks (at world 1 ddp's reduction is the identity and issues no
# collective; NCCL refuses two ranks on one GPU, and the native backend
# refuses device tensors), the per-rank device choice with several GPUs,
# or ranks on different GPUs agreeing through NCCL. Those need a machine
# with two GPUs or more: the fake-NCCL tests (TestDDPConformanceFake,
# worlds 1-4) are what covers them until then.
#
# The short steps run first and the long ones (gemm beside PyTorch, gpt's
# 300 steps) last, so that a spent budget costs the longest.
#
# Steps that this script does not list (the golden suites on CUDA, bf16,
# GPT-2 training beside the PyTorch anchor, the staged 2-rank path on one
# GPU) do not exist yet.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
OUT=${OUT:-$root/gpu_check_out}
mkdir -p "$OUT"
summary="$OUT/summary.tsv"
printf 'step\tresult\tseconds\tnote\n' >"$summary"
failed=0

# The wheels' library directories: CUDA 13 puts every library in
# nvidia/cu13/lib; CUDA 12 wheels have one directory per library.
wheel_dirs() {
	local py sites=()
	for py in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python3}" python3; do
		[[ -n "$py" ]] && command -v "$py" >/dev/null 2>&1 || continue
		mapfile -t sites < <("$py" -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' 2>/dev/null)
		[[ ${#sites[@]} -gt 0 ]] && break
	done
	if [[ ${#sites[@]} == 0 && -n "${VIRTUAL_ENV:-}" ]]; then
		sites=("$VIRTUAL_ENV"/lib/python3*/site-packages/nvidia)
	fi
	local s d dirs=()
	for s in "${sites[@]}"; do
		for d in "$s/cu13/lib" "$s/cuda_nvrtc/lib" "$s/cublas/lib" "$s/nccl/lib"; do
			[[ -d "$d" ]] && dirs+=("$d")
		done
	done
	local IFS=:
	echo "${dirs[*]}"
}

if [[ -z "${COHORT_CUDA_LIB_DIR:-}" ]]; then
	dirs=$(wheel_dirs)
	if [[ -n "$dirs" ]]; then
		export COHORT_CUDA_LIB_DIR="$dirs"
	fi
fi
echo "COHORT_CUDA_LIB_DIR=${COHORT_CUDA_LIB_DIR:-(unset: the standard places)}"
# NVRTC's PTX cache goes with the logs, so every run compiles afresh.
export COHORT_CACHE_DIR="$OUT/cache"

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
echo "GPU: ${gpu:-none found by nvidia-smi}" | tee "$OUT/gpu.txt"

# The whole run keeps inside GPU_CHECK_BUDGET seconds (default 400, so a
# lent device's 15 minutes leave room for its start and one rerun): each
# step's timeout is cut to what is left, and a step with under 10 s left
# is recorded OUT_OF_TIME instead of started.
budget=${GPU_CHECK_BUDGET:-400}
# lim SECONDS: the step's own limit, or what is left of the budget if less.
lim() {
	local left=$((budget - SECONDS))
	((left < $1)) && echo "$left" || echo "$1"
}

# record STEP RESULT SECONDS NOTE
record() {
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$summary"
	[[ "$2" == PASS ]] || failed=1
}

# run_test NAME PKGDIR FILTER SECONDS NOTE_PATTERN
run_test() {
	local name=$1 dir=$2 filter=$3 limit=$4 pattern=$5
	local bin="$root/bin/$name.test" log="$OUT/$name.log"
	if [[ ! -x "$bin" ]]; then
		record "$name" MISSING 0 "bin/$name.test not built (see the top of this script)"
		return
	fi
	limit=$(lim "$limit")
	if ((limit < 10)); then
		record "$name" OUT_OF_TIME 0 "not started: the ${budget}s budget is spent"
		return
	fi
	local t0=$SECONDS rc
	(cd "$root/$dir" && timeout "$limit" "$bin" -test.v -test.count=1 -test.timeout="$((limit - 5))s" -test.run "$filter") >"$log" 2>&1
	rc=$?
	local secs=$((SECONDS - t0))
	local pass fail skip note result
	pass=$(grep -c '^--- PASS' "$log")
	fail=$(grep -c '^--- FAIL' "$log")
	skip=$(grep -c '^--- SKIP' "$log")
	note=$(grep -Eo "$pattern" "$log" | awk '!seen[$0]++' | head -3 | paste -sd ';' -)
	if [[ $rc == 124 ]]; then
		result=TIMEOUT
	elif [[ $rc != 0 || $fail -gt 0 ]]; then
		result=FAIL
	elif [[ $skip -gt 0 ]]; then
		result=SKIPPED
		note="$(grep -Eo 'skipped: .{0,160}' "$log" | head -1) $note"
	else
		result=PASS
	fi
	record "$name" "$result" "$secs" "$pass passed, $fail failed, $skip skipped; $note"
}

if [[ -x bin/cohort ]]; then
	t0=$SECONDS
	if timeout 20 bin/cohort help >"$OUT/cohort.log" 2>&1; then
		record cohort PASS $((SECONDS - t0)) "the static binary runs here"
	else
		record cohort FAIL $((SECONDS - t0)) "bin/cohort help failed: see cohort.log"
	fi
else
	record cohort MISSING 0 "bin/cohort not built (see the top of this script)"
fi

run_test nvrtc device/nvrtc '.' 60 'NVRTC [0-9.]+ from [^ ]+'
run_test cuda device/cuda 'GPU|DriverLoads' 90 'device [^(]+\(sm_[0-9]+[^)]*\)|memset 256 MiB: [^)]+\)'
run_test cublas device/cublas 'GPU|LoadAndBind' 120 'cuBLAS [0-9.]+ from [^ ,]+'
run_test alloc device/alloc 'GPU' 60 'reserved [0-9.]+ [KMG]iB \(peak[^)]*\)'
run_test cudatensor device/cudatensor 'GPU' 150 'peak allocated [0-9.]+ [KMG]iB|worst parameter[^:]*: [0-9.e+-]+'

# NCCL: the binding loads the wheel's libnccl, then the backend passes the
# conformance suite at world 1 (one GPU) and the device all-reduce.
run_test nccl device/nccl 'GPU' 10 'NCCL [0-9.]+ from [^ ]+'
run_test ncclbackend distributed/backend/nccl 'GPU|WithoutNCCL' 60 'TestGPU[A-Za-z]+ \([0-9.]+s\)|worst parameter [0-9.e+-]+'
if [[ -x bin/cohort ]]; then
	t0=$SECONDS
	if timeout "$(lim 15)" bin/cohort bench allreduce --backend nccl --world 1 --sizes 1MiB,64MiB --budget 100ms >"$OUT/bench_nccl.log" 2>&1; then
		record bench_nccl PASS $((SECONDS - t0)) "$(grep -E '64MiB' "$OUT/bench_nccl.log" | head -1 | tr -s ' ')"
	else
		record bench_nccl FAIL $((SECONDS - t0)) "see bench_nccl.log"
	fi
fi

# run_gpu: the launcher gives each local rank one GPU.
run_gpu() {
	local t0=$SECONDS result=PASS note
	if [[ ! -x bin/cohort || ! -x bin/gpt || ! -f bin/opticks.txt ]]; then
		record run_gpu MISSING 0 "bin/cohort, bin/gpt or bin/opticks.txt not built"
		return
	fi
	local want
	want=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	timeout "$(lim 60)" bin/cohort run --nproc-per-node gpu -- bin/gpt -device cuda -steps 10 -data bin/opticks.txt >"$OUT/run_gpu.log" 2>&1 || result=FAIL
	local ranks
	ranks=$(grep -Eo '^\[rank [0-9]+\]' "$OUT/run_gpu.log" | sort -u | wc -l)
	[[ "$ranks" == "$want" ]] || result=FAIL
	note="$ranks worker(s) for $want GPU(s) by nvidia-smi"
	if CUDA_VISIBLE_DEVICES= timeout "$(lim 20)" bin/cohort run --nproc-per-node gpu -- /bin/true >"$OUT/run_gpu_none.log" 2>&1; then
		result=FAIL
		note+="; CUDA_VISIBLE_DEVICES= started workers"
	else
		note+="; CUDA_VISIBLE_DEVICES= refused: $(grep -o 'one worker per visible GPU.\{0,60\}' "$OUT/run_gpu_none.log" | head -1)"
	fi
	record run_gpu "$result" $((SECONDS - t0)) "$note"
}
run_gpu

# gemm_step: cohort's cuBLAS rates beside torch.matmul's at 4096³.
gemm_step() {
	local t0=$SECONDS n=4096 note="" result=PASS
	if [[ ! -x bin/cohort ]]; then
		record gemm MISSING 0 "bin/cohort not built"
		return
	fi
	timeout "$(lim 60)" bin/cohort bench gemm --device cuda --n $n >"$OUT/gemm_cohort.log" 2>&1 || result=FAIL
	local dt ours theirs
	for dt in fp32 bf16; do
		timeout "$(lim 60)" python3 bench/anchors/gpt2_bench.py --gemm $n --dtype $dt --model gpt-mini --steps 3 --warmup 1 >"$OUT/gemm_torch_$dt.log" 2>&1 || result=FAIL
		ours=$(awk -v d=$dt '$1=="gemm:" && $2=="cuda" && $3==d {print $9}' "$OUT/gemm_cohort.log")
		theirs=$(grep -o '"what": "gemm"[^}]*"tflops": [0-9.]*' "$OUT/gemm_torch_$dt.log" | grep -o '[0-9.]*$')
		if [[ -z "$ours" || -z "$theirs" ]]; then
			result=FAIL
			note+="$dt: cohort ${ours:-?} GFLOP/s, torch ${theirs:-?} TFLOP/s; "
			continue
		fi
		local ratio
		ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN{printf "%.3f", a/(b*1000)}')
		note+="$dt: cohort $ours GFLOP/s, torch $(awk -v b="$theirs" 'BEGIN{print b*1000}') GFLOP/s, ratio $ratio; "
		if [[ $dt == bf16 ]] && awk -v r="$ratio" 'BEGIN{exit !(r < 0.95)}'; then
			result=FAIL
		fi
	done
	record gemm "$result" $((SECONDS - t0)) "$note"
}
gemm_step

# gpt_step: GPT-mini, 300 steps on cuda:0, against the CPU's val loss.
gpt_step() {
	local t0=$SECONDS want=2.4157
	if [[ ! -x bin/gpt || ! -f bin/opticks.txt ]]; then
		record gpt MISSING 0 "bin/gpt or bin/opticks.txt not built (see the top of this script)"
		return
	fi
	local result=PASS
	timeout "$(lim 150)" bin/gpt -device cuda -steps 300 -data bin/opticks.txt >"$OUT/gpt.log" 2>&1 || result=FAIL
	local got
	got=$(awk '$1=="val" && $2=="loss:" {v=$3} END {print v}' "$OUT/gpt.log")
	if [[ -z "$got" ]] || awk -v g="$got" -v w=$want 'BEGIN{d=g-w; if (d<0) d=-d; exit !(d > 0.02)}'; then
		result=FAIL
	fi
	record gpt "$result" $((SECONDS - t0)) "val loss ${got:-?} after 300 steps on cuda:0 (CPU 2.4157, bound 0.02); $(tail -1 "$OUT/gpt.log" | cut -c1-80)"
}
gpt_step


echo
echo "gpu_check: ${gpu:-no GPU found by nvidia-smi}; logs in $OUT"
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
exit $failed
