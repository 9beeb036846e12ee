#!/usr/bin/env bash
# gpu_check.sh: the checks that need an NVIDIA GPU, run from the repository
# root on a GPU machine that has no Go toolchain (CUDA from pip's nvidia-*
# wheels in a virtual environment, PyTorch beside them). It runs prebuilt
# binaries carried to the machine:
#
#   bin/cohort       CGO_ENABLED=0 go build -o bin/cohort ./cmd/cohort
#   bin/<pkg>.test   one per package with GPU tests, built by
#                    for p in cuda nvrtc cublas alloc; do
#                      CGO_ENABLED=0 go test -c -o bin/$p.test ./device/$p
#                    done
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
# timeout; the whole script stays under 7 minutes. The exit status is 1
# when a step failed or skipped.
#
# Steps that this script does not list (the op-by-op comparison with the
# CPU path, the golden suites on CUDA, GPT-mini and GPT-2 training beside
# the PyTorch anchor) do not exist yet.
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
		for d in "$s/cu13/lib" "$s/cuda_nvrtc/lib" "$s/cublas/lib"; do
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

echo
echo "gpu_check: ${gpu:-no GPU found by nvidia-smi}; logs in $OUT"
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
exit $failed
