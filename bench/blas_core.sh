# blas_core.sh: sourced by the scripts that run PyTorch anchors. PyTorch
# on Debian multiplies through OpenBLAS, which picks its kernels by CPU
# model; a release older than the CPU (0.3.21 on a family 6 model 207
# Xeon) falls back to its generic kernel, Prescott, and runs PyTorch's
# products about 3x slower. A comparison run so would flatter cohort. So,
# unless OPENBLAS_CORETYPE is set already, blas_core PYTHON WORKDIR asks
# which kernel OpenBLAS chose and, if it is the generic one, exports
# OPENBLAS_CORETYPE as the best family the CPU's flags support (SkylakeX
# for AVX-512, Haswell for AVX2 with FMA), once products through it agree
# with the generic kernel's on this machine (float32 products of several
# shapes, transposed or not, within 1e-4 relative). It prints what it
# found and did in one line.
blas_core() {
	local python="$1" work="$2" core want flags
	if [[ -n "${OPENBLAS_CORETYPE:-}" ]]; then
		echo "blas: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE set by the caller; left as it is"
		return 0
	fi
	core="$(OPENBLAS_VERBOSE=2 "$python" -c 'import torch; torch.ones(8, 8) @ torch.ones(8, 8)' 2>&1 | sed -n 's/^Core: //p' | head -n 1)"
	if [[ -z "$core" ]]; then
		echo "blas: PyTorch's BLAS did not name its kernel (not OpenBLAS, or a build without OPENBLAS_VERBOSE): left as it is"
		return 0
	fi
	if [[ "$core" != Prescott ]]; then
		echo "blas: PyTorch's OpenBLAS runs its $core kernel"
		return 0
	fi
	flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
	want=""
	if [[ $flags == *" avx512f "* && $flags == *" avx512bw "* && $flags == *" avx512vl "* && $flags == *" avx512dq "* ]]; then
		want=SkylakeX
	elif [[ $flags == *" avx2 "* && $flags == *" fma "* ]]; then
		want=Haswell
	fi
	if [[ -z "$want" ]]; then
		echo "blas: PyTorch's OpenBLAS runs its generic Prescott kernel; this CPU has neither AVX-512 nor AVX2 with FMA, so it stays"
		return 0
	fi
	local probe='
import sys, torch
torch.manual_seed(0)
out = []
for m, n, k in ((64, 64, 64), (2048, 384, 128), (300, 257, 129), (7, 513, 1000)):
    a, b = torch.randn(m, k), torch.randn(k, n)
    out += [a @ b, a.t().contiguous().t() @ b, a @ b.t().contiguous().t()]
torch.save(out, sys.argv[1])
'
	if ! "$python" -c "$probe" "$work/blas_ref.pt" 2>/dev/null ||
		! OPENBLAS_CORETYPE="$want" "$python" -c "$probe" "$work/blas_try.pt" 2>/dev/null ||
		! "$python" -c '
import sys, torch
ref, got = torch.load(sys.argv[1]), torch.load(sys.argv[2])
ok = all(((r - g).abs() <= 1e-4 * (r.abs() + 1)).all() for r, g in zip(ref, got))
sys.exit(0 if ok and len(ref) == len(got) else 1)
' "$work/blas_ref.pt" "$work/blas_try.pt" 2>/dev/null; then
		echo "blas: PyTorch's OpenBLAS chose its generic Prescott kernel on this CPU, and its $want kernel did not match it here: PyTorch stays on Prescott (its figures are low)"
		return 0
	fi
	export OPENBLAS_CORETYPE="$want"
	echo "blas: PyTorch's OpenBLAS chose its generic Prescott kernel on this CPU (older than the CPU); runs with OPENBLAS_CORETYPE=$want (its products match Prescott's here)"
}
