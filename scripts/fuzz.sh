#!/usr/bin/env bash
# fuzz.sh: run every fuzz target of the module, one after another, for
# DURATION each, and print a table of what each did. From the repository
# root:
#
#   bash scripts/fuzz.sh [DURATION] [PATTERN]
#                          # DURATION: go test's -fuzztime (default 10m);
#                          # PATTERN: an extended regexp that picks the
#                          # targets by "pkg/dir:FuzzName" (default: all)
#   PARALLEL=1 bash scripts/fuzz.sh        # fuzzing workers per target
#                          # (go test's -parallel; default: the cores)
#   NICE=19 bash scripts/fuzz.sh           # run under nice -n NICE (default 0)
#   LOG=dir bash scripts/fuzz.sh           # each target's output in
#                          # dir/FuzzName.log (default: a temporary folder)
#   MD=1 bash scripts/fuzz.sh              # the final table in Markdown too
#   bash scripts/fuzz.sh -l                # list the targets and stop
#
# The targets are found by their declarations (func FuzzX(f *testing.F) in
# a _test.go file). The table's columns:
#
#   target      the package folder and the target
#   duration    how long the engine fuzzed (its last "elapsed")
#   execs       inputs run; execs/s: the mean rate
#   new         inputs the engine found interesting this run (they go to
#               the fuzz cache, $(go env GOCACHE)/fuzz, not the repository)
#   crashers    failing inputs written: testdata/fuzz/FuzzX/<hash> beside
#               the target; commit them, and go test runs them as
#               regression inputs from then on
#
# The script exits 1 when a target found a crasher or did not run.
set -u
cd "$(dirname "$0")/.."

dur=${1:-10m}
pat=${2:-.}
if [ "$dur" = -l ]; then
	dur=list
	pat=${2:-.}
fi
par=${PARALLEL:-}
nice=${NICE:-0}
log=${LOG:-$(mktemp -d)}
mkdir -p "$log"

# targets prints "dir:FuzzName" for each fuzz target, sorted.
targets() {
	grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
		sed -E 's#^\./##; s#/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]+).*#:\1#' | sort -u
}

list=$(targets | grep -E -- "$pat")
if [ -z "$list" ]; then
	echo "fuzz.sh: no target matches $pat" >&2
	exit 1
fi
if [ "$dur" = list ]; then
	echo "$list"
	exit 0
fi

echo "fuzz.sh: $(echo "$list" | wc -l) targets, $dur each, logs in $log; $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(go version | cut -d' ' -f3)"
rows=()
fail=0
for t in $list; do
	dir=${t%%:*}
	name=${t##*:}
	out="$log/$name.log"
	before=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | sort)
	args=(test -run='^$' -fuzz="^${name}\$" -fuzztime="$dur")
	[ -n "$par" ] && args+=(-parallel "$par")
	start=$(date +%s)
	nice -n "$nice" go "${args[@]}" "./$dir" >"$out" 2>&1
	rc=$?
	wall=$(( $(date +%s) - start ))
	after=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | sort)
	crashers=$(comm -13 <(echo "$before") <(echo "$after") | grep -c . )
	# The engine's last progress line: "fuzz: elapsed: 10m0s, execs: N (R/sec), new interesting: K (total: T)"
	last=$(grep -E '^fuzz: elapsed: .*execs: ' "$out" | tail -n 1)
	elapsed=$(sed -nE 's/^fuzz: elapsed: ([^,]+),.*/\1/p' <<<"$last")
	execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
	newi=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
	secs=$(awk -v e="${elapsed:-0s}" 'BEGIN { s = 0; if (match(e, /[0-9]+h/)) s += 3600 * substr(e, RSTART, RLENGTH - 1); if (match(e, /[0-9]+m/)) s += 60 * substr(e, RSTART, RLENGTH - 1); if (match(e, /[0-9.]+s/)) s += substr(e, RSTART, RLENGTH - 1); print s }')
	rate=$(awk -v n="${execs:-0}" -v s="$secs" 'BEGIN { if (s > 0) printf "%d", n / s; else print "-" }')
	status=ok
	if [ "$rc" -ne 0 ]; then
		status=FAIL
		fail=1
	fi
	row=$(printf '%-40s %9s %12s %9s %5s %8s  %s' "$t" "${elapsed:-${wall}s}" "${execs:--}" "$rate" "${newi:--}" "$crashers" "$status")
	echo "$row"
	rows+=("$row")
	if [ "$rc" -ne 0 ]; then
		grep -E -- '--- FAIL|Failing input|panic:|fuzz_test.go|_test.go:[0-9]+' "$out" | head -n 20 | sed 's/^/    /'
	fi
done

echo
printf '%-40s %9s %12s %9s %5s %8s  %s\n' target duration execs execs/s new crashers status
printf '%s\n' "${rows[@]}"
if [ -n "${MD:-}" ]; then
	echo
	echo '| target | duration | execs | execs/s | new | crashers |'
	echo '|---|---:|---:|---:|---:|---:|'
	printf '%s\n' "${rows[@]}" | awk '{ printf "| `%s` | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
fi
exit $fail
