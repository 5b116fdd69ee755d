#!/usr/bin/env bash
# gpu-coll.sh: compare courier's collectives with the C + NCCL program
# (bench/nccl/coll.c) on the GPU machine (2 or more GPUs, Open MPI; no Go),
# from the repository root, with the binaries gpu-build/coll and
# gpu-build/courier that scripts/gpu-run.sh and scripts/gpu-build.sh made:
#
#   bash scripts/gpu-coll.sh [ROUNDS] [OUTDIR]
#                          # default: 5 rounds, OUTDIR gpu-build/coll-compare
#   NP=4 bash scripts/gpu-coll.sh         # 4 ranks, one GPU each (default 2)
#   COLL=allreduce,reducescatter,bcast SIZES=8,1m,64m bash scripts/gpu-coll.sh
#                          # the collectives, in the order of the table
#                          # (allreduce, allgather, alltoall, reducescatter,
#                          # bcast; default allreduce,allgather,alltoall) and
#                          # the sizes (bytes, k/m/g = KiB/MiB/GiB; default
#                          # 8,128k,2m,32m,128m,512m), for both programs
#   EXTRA_C='-reps 9' EXTRA_COURIER='-x COURIER_CHECK=1' bash scripts/gpu-coll.sh
#                          # more flags for coll, more mpirun options for courier
#   MPIRUN_EXTRA='--map-by slot:PE=4' bash scripts/gpu-coll.sh
#                          # more mpirun options for both
#   LIMIT=600 bash scripts/gpu-coll.sh    # seconds each run may take (300)
#   B=/elsewhere bash scripts/gpu-coll.sh # the binaries from another folder
#
# Each round runs the C program and then courier's benchmark on the same
# collectives and sizes, so that a drift of the machine touches both alike;
# each run has LIMIT seconds and its raw output goes to OUTDIR/c-N.log or
# OUTDIR/courier-N.log. Both print a row per collective and size,
#
#   NAME BYTES TIME_US ALGBW BUSBW      (courier may add a field: ignored)
#
# and BYTES means the same for both (the sizes given, rounded to what is
# actually moved; coll.c's header comment says how). A run that fails,
# times out or prints no such row is reported and its numbers left out; the
# script goes on. At the end it prints, and writes to OUTDIR/table.md, a
# markdown table per collective and size: the medians over the rounds of
# the time per operation and of the bus bandwidth on each side, the ratios
# courier/C, and every value. Exit status 1 if any run failed.
# NCCL_NVLS_ENABLE=0 is set in every process (NVLink SHARP is not available
# on that machine).
set -uo pipefail
me=gpu-coll.sh
# shellcheck source-path=SCRIPTDIR source=compare-lib.sh
source "$(dirname "$0")/compare-lib.sh" || exit 2

rounds_arg "${1:-}"
NP=${NP:-2}
if ! [[ $NP =~ ^[1-9][0-9]*$ ]]; then
	echo "gpu-coll.sh: NP must be a number of ranks, not '$NP'" >&2
	exit 2
fi
LIMIT=${LIMIT:-300}
if ! [[ $LIMIT =~ ^[1-9][0-9]*$ ]]; then
	echo "gpu-coll.sh: LIMIT must be a number of seconds, not '$LIMIT'" >&2
	exit 2
fi
COLL=${COLL:-allreduce,allgather,alltoall}
name='(allreduce|allgather|alltoall|reducescatter|bcast)'
if ! [[ $COLL =~ ^$name(,$name)*$ ]]; then
	echo "gpu-coll.sh: COLL must be a comma-separated list of allreduce, allgather, alltoall, reducescatter, bcast, not '$COLL'" >&2
	exit 2
fi
SIZES=${SIZES:-8,128k,2m,32m,128m,512m}
size='[0-9]+[kKmMgG]?'
if ! [[ $SIZES =~ ^$size(,$size)*$ ]]; then
	echo "gpu-coll.sh: SIZES must be a comma-separated list of byte counts (with k, m or g), not '$SIZES'" >&2
	exit 2
fi

folders "${2:-}" coll-compare
binaries "(scripts/gpu-run.sh builds coll, scripts/gpu-build.sh courier)" coll courier

mpirun_base "$NP"
cmd_c=("${M[@]}" ./coll -coll "$COLL" -sizes "$SIZES" ${extra_c[@]+"${extra_c[@]}"})
cmd_courier=("${M[@]}" -x COURIER_BACKEND=nccl -x COURIER_TIMEOUT=60s ${extra_courier[@]+"${extra_courier[@]}"}
	./courier bench -device -coll "$COLL" -collsizes "$SIZES")

# A result row: a collective's name, then a whole number of bytes.
row='^[[:space:]]*(allreduce|allgather|alltoall|reducescatter|bcast)[[:space:]]+[0-9]+[[:space:]]'

run_rounds

# table FILES: the markdown table from the result rows of the runs that
# passed. A row counts if its first field is a collective's name and the
# next four are numbers (bytes a whole one); anything else in the logs
# (headers, init, stderr, NCCL's warnings) is skipped, and so are fields
# after the fifth. In a run, the first row of each (collective, bytes)
# counts. Rows are sorted by collective, in the order of COLL, then bytes.
table() {
	awk -v order="$COLL" "$table_lib"'
	# A measure is a collective and size (KEY) and what was measured:
	# KEY SUBSEP "time" and KEY SUBSEP "busbw".
	function before(x, y) {
		if (pos[collof[x]] != pos[collof[y]]) return pos[collof[x]] < pos[collof[y]]
		return bytesof[x] + 0 < bytesof[y] + 0
	}
	BEGIN {
		ncoll = split(order, o, ",")
		for (i = 1; i <= ncoll; i++) if (!(o[i] in pos)) pos[o[i]] = i
		split("allreduce allgather alltoall reducescatter bcast", names, " ")
		for (i in names) known[names[i]] = 1
	}
	{ sub(/\r$/, "") }
	($1 in known) && NF >= 5 && isint($2) && isnum($3) && isnum($4) && isnum($5) {
		key = $1 " " ($2 + 0)
		if ((FILENAME, side, key) in seen) next
		seen[FILENAME, side, key] = 1
		if (!(key in collof)) {
			keys[++nkeys] = key
			collof[key] = $1
			bytesof[key] = $2 + 0
			# a collective not in COLL goes after those that are
			if (!($1 in pos)) pos[$1] = ++ncoll
		}
		c = ++n[side, key, "time"]
		n[side, key, "busbw"] = c
		val[side, key, "time", c] = $3
		val[side, key, "busbw", c] = $5
	}
	END {
		sort_keys()
		print "| collective | bytes | C time (µs) | courier time (µs) | courier/C time | C busbw (GB/s) | courier busbw (GB/s) | courier/C busbw | C times | courier times | C busbw | courier busbw |"
		print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"
		for (i = 1; i <= nkeys; i++) {
			k = keys[i]
			tk = k SUBSEP "time"; bk = k SUBSEP "busbw"
			tc = median("c", tk); tr = median("courier", tk)
			bc = median("c", bk); br = median("courier", bk)
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", \
				collof[k], human(bytesof[k]), \
				fmt(tc, "%.2f"), fmt(tr, "%.2f"), ratio(tr, tc), \
				fmt(bc, "%.2f"), fmt(br, "%.2f"), ratio(br, bc), \
				values("c", tk), values("courier", tk), \
				values("c", bk), values("courier", bk)
		}
		if (nkeys == 0) print "| (no results) | - | - | - | - | - | - | - | - | - | - | - |"
		print ""
		print "courier/C is the ratio of the medians: for the time lower is better, for the bus bandwidth higher is better."
	}
	' "$@"
}

report "## C + NCCL vs courier (nccl backend, device memory): collectives on $NP ranks, medians of $ROUNDS rounds"
