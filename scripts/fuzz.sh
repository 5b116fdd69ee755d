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
#   JOBS=N bash scripts/fuzz.sh            # fuzz N targets at once (default 1)
#   BUILD=dir bash scripts/fuzz.sh [DURATION] [PATTERN]
#                          # build each package's instrumented test binary
#                          # (go test -c -fuzz) into dir and stop: for a
#                          # machine without Go
#   BIN=dir bash scripts/fuzz.sh [DURATION] [PATTERN]
#                          # fuzz with the binaries BUILD left in dir, in
#                          # each package's folder (its seeds and testdata);
#                          # the engine's cache in $CACHE (default
#                          # dir/cache), so a second run goes on from the first
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

# bin names the test binary BUILD writes and BIN runs for package folder $1.
bin() { echo "$1.test" | tr / _; }

if [ -n "${BUILD:-}" ]; then
	mkdir -p "$BUILD"
	for dir in $(echo "$list" | cut -d: -f1 | sort -u); do
		echo "fuzz.sh: building $BUILD/$(bin "$dir")"
		go test -c -fuzz=. -ldflags='-s -w' -o "$BUILD/$(bin "$dir")" "./$dir" || exit 1
	done
	exit 0
fi
if [ -n "${BIN:-}" ]; then
	BIN=$(cd "$BIN" && pwd)
	cache=${CACHE:-$BIN/cache}
	mkdir -p "$cache"
	version="test binaries in $BIN"
else
	version=$(go version | cut -d' ' -f3)
fi

echo "fuzz.sh: $(echo "$list" | wc -l) targets, $dur each, ${JOBS:-1} at once, logs in $log; $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $version"

# fuzz runs target $1 ("dir:FuzzName") and writes its table row to
# $log/FuzzName.row (and the failure's lines, indented, after it).
fuzz() {
	local t=$1 dir=${1%%:*} name=${1##*:}
	local out="$log/$name.log" before after rc start wall crashers last elapsed execs newi secs rate status
	before=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | sort)
	start=$(date +%s)
	if [ -n "${BIN:-}" ]; then
		local args=(-test.run='^$' -test.fuzz="^${name}\$" -test.fuzztime="$dur" -test.fuzzcachedir="$cache")
		[ -n "$par" ] && args+=(-test.parallel "$par")
		(cd "$dir" && nice -n "$nice" "$BIN/$(bin "$dir")" "${args[@]}") >"$out" 2>&1
	else
		local args=(test -run='^$' -fuzz="^${name}\$" -fuzztime="$dur")
		[ -n "$par" ] && args+=(-parallel "$par")
		nice -n "$nice" go "${args[@]}" "./$dir" >"$out" 2>&1
	fi
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
	[ "$rc" -ne 0 ] && status=FAIL
	printf '%-40s %9s %12s %9s %5s %8s  %s\n' "$t" "${elapsed:-${wall}s}" "${execs:--}" "$rate" "${newi:--}" "$crashers" "$status" >"$log/$name.row"
	if [ "$rc" -ne 0 ]; then
		grep -E -- '--- FAIL|Failing input|panic:|fuzz_test.go|_test.go:[0-9]+' "$out" | head -n 20 | sed 's/^/    /' >>"$log/$name.row"
	fi
	head -n 1 "$log/$name.row"
}

jobs=${JOBS:-1}
running=0
for t in $list; do
	if [ "$running" -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	fuzz "$t" &
	running=$((running + 1))
done
wait

rows=()
fail=0
for t in $list; do
	row=$(cat "$log/${t##*:}.row" 2>/dev/null || printf '%-40s %9s %12s %9s %5s %8s  %s' "$t" - - - - - FAIL)
	rows+=("$(head -n 1 <<<"$row")")
	if grep -q ' FAIL$' <<<"$(head -n 1 <<<"$row")"; then
		fail=1
		tail -n +2 <<<"$row"
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
