#!/usr/bin/env bash
# gpu-compare.sh: compare courier's benchmark with the C + NCCL program
# (bench/nccl/p2p.c) on the GPU machine (2 GPUs, Open MPI; no Go), from the
# repository root, with the binaries gpu-build/p2p and gpu-build/courier
# that scripts/gpu-build.sh and scripts/gpu-run.sh made:
#
#   bash scripts/gpu-compare.sh [ROUNDS] [OUTDIR]
#                          # default: 5 rounds, OUTDIR gpu-build/compare
#   MEM=host bash scripts/gpu-compare.sh     # courier from host memory (the
#                                            # C program always uses device
#                                            # memory)
#   EXTRA_C='-group' EXTRA_COURIER='-x COURIER_CHECK=1' bash scripts/gpu-compare.sh
#                          # more flags for p2p, more mpirun options for courier
#   MPIRUN_EXTRA='--map-by slot:PE=4' bash scripts/gpu-compare.sh
#                          # more mpirun options for both (here: 4 cores per
#                          # rank instead of mpirun's default of one)
#   B=/elsewhere bash scripts/gpu-compare.sh # the binaries from another folder
#
# Each round runs the C program and then courier's benchmark (the same
# sizes), so that a drift of the machine touches both alike; each run has
# 150 s and its raw output goes to OUTDIR/c-N.log or OUTDIR/courier-N.log.
# A run that fails or times out is reported and its numbers left out; the
# script goes on. At the end it prints, and writes to OUTDIR/table.md, a
# markdown table of the medians over the rounds (courier's init against the
# C program's init+ctx: from before the CUDA context to a connected
# communicator), the ratio courier/C and every value. Exit status 1 if any
# run failed. NCCL_NVLS_ENABLE=0 is set in every process (NVLink SHARP is not
# available on that machine).
set -uo pipefail
me=gpu-compare.sh
# shellcheck source-path=SCRIPTDIR source=compare-lib.sh
source "$(dirname "$0")/compare-lib.sh" || exit 2

rounds_arg "${1:-}"
folders "${2:-}" compare
binaries "(scripts/gpu-build.sh builds courier, scripts/gpu-run.sh p2p)" p2p courier

mpirun_base 2
case ${MEM:-device} in
device)
	mem=(-device)
	memory="device memory"
	cnote=
	;;
host)
	mem=()
	memory="host memory"
	cnote=" (the C program always uses device memory)"
	;;
*)
	echo "gpu-compare.sh: MEM must be device or host, not '$MEM'" >&2
	exit 2
	;;
esac
cmd_c=("${M[@]}" ./p2p ${extra_c[@]+"${extra_c[@]}"})
cmd_courier=("${M[@]}" -x COURIER_BACKEND=nccl -x COURIER_TIMEOUT=30s ${extra_courier[@]+"${extra_courier[@]}"}
	./courier bench ${mem[@]+"${mem[@]}"} -pattern stream -lat "8,128k" -bw "2m,32m,128m,512m")
LIMIT=150
# A result row: init, init+ctx, latency or bandwidth, then a number or "-".
row='^[[:space:]]*(init|init\+ctx|latency|bandwidth)[[:space:]]+[-0-9]'

run_rounds

# The table, from the result rows of the runs that passed (a row's first
# field is init, init+ctx, latency or bandwidth; anything else in the logs,
# stderr and NCCL's warnings included, is skipped, and so is a row whose
# numbers do not parse). In a run, the first row of each measure counts.
table() {
	awk "$table_lib"'
	# add(KEY, KIND, BYTES, VALUE): one value of this run for KEY.
	function add(key, kind, bytes, v) {
		if ((FILENAME, side, key) in seen) return 0
		seen[FILENAME, side, key] = 1
		if (!(key in kindof)) {
			nkeys++
			keys[nkeys] = key
			kindof[key] = kind
			bytesof[key] = bytes
		}
		n[side, key]++
		val[side, key, n[side, key]] = v
		return 1
	}
	function rank(key) {
		return (kindof[key] == "init" ? 0 : kindof[key] == "latency" ? 1 : 2)
	}
	function before(x, y) {
		if (rank(x) != rank(y)) return rank(x) < rank(y)
		return bytesof[x] + 0 < bytesof[y] + 0
	}
	{ sub(/\r$/, "") }
	($1 == "init" && side == "courier") || ($1 == "init+ctx" && side == "c") {
		if (NF >= 3 && $2 == "-" && isnum($3)) add("init", "init", 0, $3)
		next
	}
	$1 == "latency" {
		if (NF >= 4 && isint($2) && isnum($3) && add("latency " $2, "latency", $2, $3)) {
			if (side == "courier" && NF >= 5 && isnum($5)) {
				k = "latency " $2
				if (!(k in allocs) || $5 + 0 > allocs[k] + 0) allocs[k] = $5
			}
		}
		next
	}
	$1 == "bandwidth" {
		if (NF >= 4 && isint($2) && $3 == "-" && isnum($4)) add("bandwidth " $2, "bandwidth", $2, $4)
		next
	}
	END {
		sort_keys()
		print "| measure | C median | courier median | courier/C | C runs | courier runs |"
		print "| --- | ---: | ---: | ---: | --- | --- |"
		for (i = 1; i <= nkeys; i++) {
			k = keys[i]
			kind = kindof[k]
			if (kind == "init") { name = "init (µs)"; f = "%.1f" }
			else if (kind == "latency") { name = "latency " human(bytesof[k]) " (µs)"; f = "%.2f" }
			else { name = "bandwidth " human(bytesof[k]) " (GB/s)"; f = "%.3f" }
			mc = median("c", k)
			mr = median("courier", k)
			printf "| %s | %s | %s | %s | %s | %s |\n", name, \
				fmt(mc, f), fmt(mr, f), ratio(mr, mc), \
				values("c", k), values("courier", k)
		}
		if (nkeys == 0) print "| (no results) | - | - | - | - | - |"
		print ""
		print "courier/C is the ratio of the medians: for init and latency lower is better, for bandwidth higher is better."
		print ""
		line = ""
		for (i = 1; i <= nkeys; i++) {
			k = keys[i]
			if (k in allocs) line = line (line == "" ? "" : ", ") human(bytesof[k]) " " allocs[k]
		}
		print "courier allocs/msg (max over runs, latency rows): " (line == "" ? "-" : line)
	}
	' "$@"
}

report "## C + NCCL (device memory) vs courier (nccl backend, $memory, stream pattern): medians of $ROUNDS rounds$cnote"
