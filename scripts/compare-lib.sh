# shellcheck shell=bash
# shellcheck disable=SC2154 # me, row, cmd_c and cmd_courier are the script's
# compare-lib.sh: what scripts/gpu-compare.sh and scripts/gpu-coll.sh have
# in common, sourced by both (it is not run by itself), the awk functions
# of their tables included (table_lib). Each of them sets
# me (its name, for messages) before calling anything here, and before
# run_rounds: cmd_c and cmd_courier (the two command lines), LIMIT (the
# seconds a run may take) and row (an extended regexp that matches a result
# row in a log); report calls the script's own function table FILES, which
# prints the markdown table from the operands side=c FILE and
# side=courier FILE.

failed=() # "round N C (why)", for the report
ok=()     # the awk operands: side=c FILE or side=courier FILE, in round order

# table_lib: the awk functions both scripts' table programs start with.
# The values of a measure KEY on a SIDE (c or courier) are
# val[SIDE, KEY, 1..n[SIDE, KEY]], in round order; the measures are
# keys[1..nkeys], and sort_keys orders them by the program's own
# before(X, Y).
# shellcheck disable=SC2016,SC2034 # awk's $ fields, not the shell's; for the scripts
table_lib='
	function isnum(s) { return s ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
	function isint(s) { return s ~ /^[0-9]+$/ }
	function human(b) {
		if (b >= 1073741824 && b % 1073741824 == 0) return (b / 1073741824) " GiB"
		if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
		if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
		return b " B"
	}
	# median(SIDE, KEY): of the values, sorted; "" when there are none.
	function median(s, key,    c, i, j, t, a) {
		c = n[s, key] + 0
		if (c == 0) return ""
		for (i = 1; i <= c; i++) a[i] = val[s, key, i] + 0
		for (i = 2; i <= c; i++) {
			t = a[i]
			for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
			a[j + 1] = t
		}
		if (c % 2 == 1) return a[(c + 1) / 2]
		return (a[c / 2] + a[c / 2 + 1]) / 2
	}
	# values(SIDE, KEY): every value, in round order; "-" if none.
	function values(s, key,    c, i, out) {
		c = n[s, key] + 0
		out = ""
		for (i = 1; i <= c; i++) out = out (i > 1 ? " " : "") val[s, key, i]
		return c ? out : "-"
	}
	# fmt(V, F): V printed with format F, or "-" when missing.
	function fmt(v, f) { return v == "" ? "-" : sprintf(f, v) }
	# ratio(A, B): A / B, or "-" when either is missing or B is 0.
	function ratio(a, b) { return (a != "" && b != "" && b + 0 > 0) ? sprintf("%.3f", a / b) : "-" }
	# sort_keys: keys[1..nkeys] in the order of before(X, Y).
	function sort_keys(    i, j, t) {
		for (i = 2; i <= nkeys; i++) {
			t = keys[i]
			for (j = i - 1; j >= 1 && before(t, keys[j]); j--) keys[j + 1] = keys[j]
			keys[j + 1] = t
		}
	}
'

# rounds_arg [ROUNDS]: ROUNDS from the script's first argument (default 5);
# exit status 2, with the usage, when it is not a positive number.
rounds_arg() {
	ROUNDS=${1:-5}
	if ! [[ $ROUNDS =~ ^[1-9][0-9]*$ ]]; then
		echo "$me: ROUNDS must be a positive number, not '$ROUNDS'" >&2
		echo "usage: bash scripts/$me [ROUNDS] [OUTDIR]" >&2
		exit 2
	fi
}

# folders [OUTDIR] SUBDIR: B and OUT as absolute paths, OUT made, and the
# repository root the working directory. OUTDIR and B, when given, are
# taken from where the script was started; by default B is gpu-build and
# OUT is B/SUBDIR. Exit status 2 if a folder cannot be made or entered.
folders() {
	OUT=$1
	if [ -n "$OUT" ]; then
		mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
	fi
	if [ -n "${B:-}" ]; then
		B=$(cd "$B" && pwd) || exit 2
	fi
	cd "$(dirname "$0")/.." || exit 2
	B=${B:-$PWD/gpu-build}
	OUT=${OUT:-$B/$2}
	mkdir -p "$OUT" || exit 2
}

# binaries HINT NAME...: exit status 2 if a NAME is not an executable in B;
# HINT (in parentheses) says which scripts build them.
binaries() {
	local hint=$1 f
	shift
	for f in "$@"; do
		if ! [ -x "$B/$f" ]; then
			echo "$me: no $B/$f $hint" >&2
			exit 2
		fi
	done
}

# mpirun_base NP: M, the start of both command lines (mpirun on NP ranks,
# NCCL_NVLS_ENABLE=0, the options in MPIRUN_EXTRA), and extra_c and
# extra_courier, the words of EXTRA_C and EXTRA_COURIER.
# NCCL_NVLS_ENABLE=0 is also exported here.
# shellcheck disable=SC2034 # M, extra_c and extra_courier are for the script
mpirun_base() {
	local mpirun_extra
	export NCCL_NVLS_ENABLE=0
	read -ra mpirun_extra <<<"${MPIRUN_EXTRA:-}"
	M=(mpirun --allow-run-as-root -np "$1" -x NCCL_NVLS_ENABLE=0 ${mpirun_extra[@]+"${mpirun_extra[@]}"})
	read -ra extra_c <<<"${EXTRA_C:-}"
	read -ra extra_courier <<<"${EXTRA_COURIER:-}"
}

# run SIDE ROUND CMD...: run CMD in $B with the time limit, its output in
# $OUT/SIDE-ROUND.log; a run that exits 0 and prints at least one result
# row goes into ok, any other into failed.
run() {
	local side=$1 r=$2
	shift 2
	local log=$OUT/$side-$r.log start=$SECONDS rc why='' who=C
	[ "$side" = c ] || who=$side
	(cd "$B" && timeout --kill-after=10 "$LIMIT" "$@") >"$log" 2>&1
	rc=$?
	printf 'round %d/%d %-8s rc=%-3d %4ds\n' "$r" "$ROUNDS" "$side" "$rc" $((SECONDS - start)) >&2
	case $rc in
	0) grep -Eq "$row" "$log" || why="exit 0 but no results" ;;
	124 | 137) why="timed out after $LIMIT s" ;;
	*) why="exit status $rc" ;;
	esac
	if [ -n "$why" ]; then
		failed+=("round $r $who ($why)")
		echo "$me: round $r: $who failed ($why); its rows are left out. The end of $log:" >&2
		tail -n 5 "$log" | sed 's/^/    /' >&2
		return
	fi
	ok+=("side=$side" "$log")
}

# run_rounds: ROUNDS rounds, each the C program and then courier's
# benchmark; started is when the first began.
run_rounds() {
	local r
	started=$(date -u)
	for ((r = 1; r <= ROUNDS; r++)); do
		run c "$r" "${cmd_c[@]}"
		run courier "$r" "${cmd_courier[@]}"
	done
}

# shown CMD...: CMD as one line to paste into a shell (quoted only where
# needed).
shown() {
	local a out=
	for a in "$@"; do
		if ! [[ $a =~ ^[-A-Za-z0-9_./:=,+@%]+$ ]]; then
			a=$(printf '%q' "$a")
		fi
		out+="${out:+ }$a"
	done
	echo "$out"
}

# The NCCL version, from the first C header line ("# C + NCCL 22803, ...").
nccl_version() {
	local f v r
	for ((r = 1; r <= ROUNDS; r++)); do
		f=$OUT/c-$r.log
		[ -f "$f" ] || continue
		v=$(awk '$1 == "#" && $2 == "C" && $3 == "+" && $4 == "NCCL" { v = $5; sub(/,$/, "", v); print v; exit }' "$f")
		if [ -n "$v" ]; then
			if [[ $v =~ ^[0-9]+$ ]] && [ "$v" -ge 20900 ]; then
				v="$v ($((v / 10000)).$((v % 10000 / 100)).$((v % 100)))"
			fi
			echo "$v"
			return
		fi
	done
	echo unknown
}

# report TITLE: print, and write to OUT/table.md, TITLE, the table, the
# commands, the NCCL version and the failed runs; then exit, with status 1
# if any run failed and 0 if none did.
report() {
	{
		echo "$1"
		echo
		table ${ok[@]+"${ok[@]}"}
		echo
		echo "Commands (in $B): C \`$(shown "${cmd_c[@]}")\`; courier \`$(shown "${cmd_courier[@]}")\`; NCCL $(nccl_version); $started to $(date -u)."
		echo
		if [ ${#failed[@]} -gt 0 ]; then
			echo "FAILED runs, left out: $(printf '%s; ' "${failed[@]}" | sed 's/; $//')."
		else
			echo "All runs passed ($ROUNDS of each)."
		fi
	} | tee "$OUT/table.md"

	if [ ${#failed[@]} -gt 0 ]; then
		exit 1
	fi
	exit 0
}
