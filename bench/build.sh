# build.sh: sourced by the comparison scripts. cohort_build ROOT OUT puts
# the cohort command at OUT: a copy of $COHORT_BIN when it is set (a
# prebuilt binary, for a machine without a Go toolchain; the GPT-mini runs
# there also need $OPTICKS to name the text), else `go build` of ROOT's
# ./cmd/cohort.
cohort_build() {
	local root="$1" out="$2"
	if [[ -n "${COHORT_BIN:-}" ]]; then
		if [[ ! -f "$COHORT_BIN" || ! -x "$COHORT_BIN" ]]; then
			echo "COHORT_BIN=$COHORT_BIN: not an executable file" >&2
			return 1
		fi
		cp "$COHORT_BIN" "$out"
		return 0
	fi
	(cd "$root" && go build -o "$out" ./cmd/cohort)
}
