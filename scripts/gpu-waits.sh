#!/usr/bin/env bash
# gpu-waits.sh: one-way latency (8 B and 128 KiB) of the C + NCCL program
# (bench/nccl/p2p.c) laid out in several ways, and of courier in several
# configurations, on the GPU machine (2 GPUs, Open MPI; no Go), from the
# repository root, with gpu-build/p2p and gpu-build/courier:
#
#   bash scripts/gpu-waits.sh [ROUNDS] [OUTDIR]   # default: 3, gpu-build/waits
#
# It tells which part of courier's design costs what: a communicator per
# direction, grouped launches, the way a completion is waited for
# (cudaStreamSynchronize, an event polled or synchronized, the stream
# polled, a completion word), the context pushed around each launch. Each
# round runs every variant once, so that a drift of the machine touches all
# alike; the table gives each variant's median over the rounds (latency
# rows of the programs' output, µs) and its difference from the first.
set -uo pipefail

ROUNDS=${1:-3}
if ! [[ $ROUNDS =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: bash scripts/gpu-waits.sh [ROUNDS] [OUTDIR]" >&2
	exit 2
fi
OUT=${2:-}
if [ -n "$OUT" ]; then
	mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
fi
cd "$(dirname "$0")/.." || exit 2
B=${B:-$PWD/gpu-build}
OUT=${OUT:-$B/waits}
mkdir -p "$OUT" || exit 2
export NCCL_NVLS_ENABLE=0
M=(mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0)
CB=(-x COURIER_BACKEND=nccl -x COURIER_TIMEOUT=30s)
LAT="bench -device -pattern stream -lat 8,128k -bw ''"

# The variants: NAME|COMMAND (run in $B; the first is the baseline).
variants=(
	"c|${M[*]} ./p2p"
	"c-twocomms|${M[*]} ./p2p -twocomms"
	"c-twocomms-onestream|${M[*]} ./p2p -twocomms -onestream"
	"c-twocomms-group|${M[*]} ./p2p -twocomms -group -wait stream"
	"c-twocomms-group-query|${M[*]} ./p2p -twocomms -group -wait query"
	"c-twocomms-group-evsync|${M[*]} ./p2p -twocomms -group -wait evsync"
	"c-twocomms-group-squery|${M[*]} ./p2p -twocomms -group -wait squery"
	"c-twocomms-group-word|${M[*]} ./p2p -twocomms -group -wait word"
	"c-twocomms-group-word-ctx|${M[*]} ./p2p -twocomms -group -wait word -ctx"
	"courier|${M[*]} ${CB[*]} ./courier $LAT"
	"courier-events|${M[*]} ${CB[*]} -x COURIER_NCCL_EVENTS=1 ./courier $LAT"
	"courier-unshared|${M[*]} ${CB[*]} -x COURIER_NCCL_SHARED_STREAM=0 ./courier $LAT"
)
# VARIANTS replaces the list, EXTRA_VARIANTS adds to it: NAME|COMMAND
# lines, where COMMAND may use ${M[*]} (mpirun and its options), ${CB[*]}
# (courier's backend) and $LAT (courier's latency benchmark).
if [ -n "${VARIANTS:-}" ]; then
	variants=()
fi
while IFS= read -r v; do
	[ -n "$v" ] && variants+=("$v")
done <<<"${VARIANTS:-}
${EXTRA_VARIANTS:-}"

failed=0
for ((r = 1; r <= ROUNDS; r++)); do
	for v in "${variants[@]}"; do
		name=${v%%|*} cmd=${v#*|}
		log=$OUT/$name-$r.log
		# The commands are ours, split on spaces; -bw "" stays one empty argument.
		cmd=${cmd//\$LAT/$LAT}
		eval "set -- $cmd"
		(cd "$B" && timeout --kill-after=10 120 "$@") >"$log" 2>&1
		rc=$?
		printf 'round %d/%d %-28s rc=%d\n' "$r" "$ROUNDS" "$name" "$rc" >&2
		[ $rc -eq 0 ] || failed=1
	done
done

{
	echo "| variant | 8 B (µs) | Δ | 128 KiB (µs) | Δ | 8 B runs |"
	echo "| --- | ---: | ---: | ---: | ---: | --- |"
	for v in "${variants[@]}"; do
		name=${v%%|*}
		for ((r = 1; r <= ROUNDS; r++)); do
			f=$OUT/$name-$r.log
			awk '$1 == "latency" && ($2 == 8 || $2 == 131072) { print $2, $3 }' "$f" | awk '!seen[$1]++'
		done | awk -v name="$name" '
		function med(k,   c, i, j, t, a) {
			c = n[k]; if (!c) return ""
			for (i = 1; i <= c; i++) a[i] = v[k, i]
			for (i = 2; i <= c; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
			return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
		}
		{ n[$1]++; v[$1, n[$1]] = $2 + 0; runs[$1] = runs[$1] " " $2 }
		END { printf "%s %s %s%s\n", name, med(8), med(131072), runs[8] }'
	done | awk '
	NR == 1 { b8 = $2; b128 = $3 }
	{ r = ""; for (i = 4; i <= NF; i++) r = r (i > 4 ? " " : "") $i
	  printf "| %s | %.2f | %+.2f | %.2f | %+.2f | %s |\n", $1, $2, $2 - b8, $3, $3 - b128, r }'
} | tee "$OUT/table.md"
exit $failed
