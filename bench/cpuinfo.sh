#!/usr/bin/env bash
# cpuinfo.sh: sourced by the comparison scripts, which print the machine
# they measured on first: figures from two CPUs compare only as ratios.

# cpu_info PREFIX prints one line: the CPU's model name, family and model
# numbers, CPUs available, and the cache sizes of CPU 0 (L1 data and
# instruction and L2 per core, L3 shared), from /proc/cpuinfo and /sys,
# or, where a guest's /sys has no cache entries, from getconf (the C
# library's reading of CPUID, as the guest sees it).
cpu_info() {
	local prefix="$1" model family num caches="" d type
	model="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
	family="$(grep -m1 '^cpu family' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
	num="$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
	for d in /sys/devices/system/cpu/cpu0/cache/index*; do
		[ -r "$d/size" ] || continue
		case "$(cat "$d/type")" in
		Data) type=d ;;
		Instruction) type=i ;;
		*) type= ;;
		esac
		caches+=" L$(cat "$d/level")$type $(cat "$d/size")"
	done
	if [[ -z "$caches" ]] && command -v getconf >/dev/null; then
		local name size
		for name in LEVEL1_DCACHE:L1d LEVEL1_ICACHE:L1i LEVEL2_CACHE:L2 LEVEL3_CACHE:L3; do
			size="$(getconf "${name%%:*}_SIZE" 2>/dev/null)"
			[[ "$size" =~ ^[0-9]+$ && "$size" -gt 0 ]] || continue
			if ((size >= 1 << 20)); then
				caches+=" ${name#*:} $((size >> 20))M"
			else
				caches+=" ${name#*:} $((size >> 10))K"
			fi
		done
	fi
	echo "$prefix: CPU ${model:-unknown}, family ${family:-?} model ${num:-?}, $(nproc) CPUs available, caches:${caches:- unknown}"
}
