#!/usr/bin/env bash
# gpu-ipc.sh: the CUDA IPC path between 2 ranks sharing one GPU, beside
# its C floor, in one command on the GPU machine (from the repository
# root, with the binaries scripts/gpu-build.sh made in gpu-build/):
#
#   bash scripts/gpu-ipc.sh [ROUNDS] [LOGDIR]     # default 3, gpu-build/ipc-logs
#
# Each round runs, one after another: the C floor (bench/cuda/ipc.c) as
# it is (the sender pushes, cudaStreamSynchronize) and as courier moves a
# message (the receiver pulls, a polled event); courier bench -device
# bound to a core (mpirun's default) and with --bind-to none; every other
# build there named courier-* (gpu-build/courier-old, say: builds to
# compare with), bound; and courier bound on the fake GPU of the tests
# (backend/nccl/testdata/fakegpu.c, whose copies the CPU does at once):
# the path's own CPU time on this machine, with no GPU in it. Every
# process has NCCL_NVLS_ENABLE=0. The medians of the rounds are printed
# last, one table of every variant's rows.
#
# VARIANTS limits the variants run (a regular expression over their
# names: c-push, c-pull, courier, courier-unbound, courier-fake, and the
# other builds' file names); TRACE=1 adds one run of courier's latency
# rows with COURIER_TRACE, its timeline files in LOGDIR/trace.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=$PWD/gpu-build
ROUNDS=${1:-3}
LOG=${2:-$B/ipc-logs}
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0
CUDA=${CUDA_HOME:-/usr/local/cuda}
M=(mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 -x COURIER_DEVICE=0)
LAT=${LAT:-8,128k}
BW=${BW:-2m,32m,128m,512m}

C=1
if ! mpicc -O2 -o "$B/ipc" bench/cuda/ipc.c -I"$CUDA/include" -L"$CUDA/lib64" -lcudart -lrt >"$LOG/build.log" 2>&1; then
	echo "gpu-ipc.sh: building bench/cuda/ipc.c failed (no C floor in this run):" >&2
	tail -3 "$LOG/build.log" >&2
	C=
fi

FAKE=()
if cc -shared -fPIC -O1 -I backend/nccl -o "$B/libfakegpu.so" backend/nccl/testdata/fakegpu.c -lpthread >>"$LOG/build.log" 2>&1; then
	FAKE=(-x COURIER_CUDA_LIBRARY="$B/libfakegpu.so" -x COURIER_NCCL_LIBRARY="$B/libfakegpu.so")
fi

# run NAME ROUND CMD...: one variant's run, its output in LOG/NAME.ROUND.
run() {
	local name=$1 round=$2
	shift 2
	if [ -n "${VARIANTS:-}" ] && ! [[ $name =~ $VARIANTS ]]; then
		return 0
	fi
	local start=$SECONDS
	timeout --kill-after=10 150 "$@" >"$LOG/$name.$round" 2>&1
	printf '%-18s round %d rc=%d %3ds\n' "$name" "$round" $? $((SECONDS - start))
}

courier_bench=(-x COURIER_BACKEND=nccl -x COURIER_TIMEOUT=60s bench -device -pattern stream -lat "$LAT" -bw "$BW" -reps 1)
for r in $(seq 1 "$ROUNDS"); do
	if [ -n "$C" ]; then
		run c-push "$r" "${M[@]}" "$B/ipc" -token mpi -lat "$LAT" -bw "$BW"
		run c-pull "$r" "${M[@]}" "$B/ipc" -token mpi -pull -wait poll -lat "$LAT" -bw "$BW"
	fi
	run courier "$r" "${M[@]}" "${courier_bench[@]:0:4}" "$B/courier" "${courier_bench[@]:4}"
	run courier-unbound "$r" "${M[@]}" --bind-to none "${courier_bench[@]:0:4}" "$B/courier" "${courier_bench[@]:4}"
	if [ ${#FAKE[@]} -gt 0 ]; then
		run courier-fake "$r" "${M[@]}" "${FAKE[@]}" "${courier_bench[@]:0:4}" "$B/courier" "${courier_bench[@]:4}"
	fi
	for x in "$B"/courier-*; do # other builds to compare with, bound
		[ -x "$x" ] && run "${x##*/}" "$r" "${M[@]}" "${courier_bench[@]:0:4}" "$x" "${courier_bench[@]:4}"
	done
done
if [ -n "${TRACE:-}" ]; then
	mkdir -p "$LOG/trace"
	timeout 120 "${M[@]}" -x COURIER_BACKEND=nccl -x COURIER_TRACE="$LOG/trace/rank%r.json" \
		"$B/courier" bench -device -lat 8 -bw 2m -reps 1 >"$LOG/trace.out" 2>&1
	echo "trace rc=$?"
fi

# The medians of each variant's rows (latency in µs, bandwidth in GB/s),
# with their spread.
awk '
	FNR == 1 { split(FILENAME, p, "/"); v = p[length(p)]; sub(/\.[0-9]+$/, "", v); vs[v] = 1 }
	$1 == "latency" && $3 ~ /^[0-9.]+$/ { k = "latency " $2; add(v, k, $3) }
	$1 == "bandwidth" && $3 == "-" && $4 ~ /^[0-9.]+$/ { k = "bandwidth " $2; add(v, k, $4) }
	$1 == "bandwidth" && $3 ~ /^[0-9.]+$/ && $4 == "" { k = "bandwidth " $2; add(v, k, $3) }
	function add(v, k, x) { if (!(k in ks)) { nk++; kk[nk] = k }; ks[k] = 1; n[v, k]++; val[v, k, n[v, k]] = x + 0 }
	function med(v, k,   m, i, j, t, a) {
		m = n[v, k]; if (m == 0) return "-"
		for (i = 1; i <= m; i++) a[i] = val[v, k, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return sprintf("%.1f (%.1f-%.1f)", (m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2), a[1], a[m])
	}
	END {
		printf "%-20s", "row"; for (v in vs) printf " | %-24s", v; printf "\n"
		for (i = 1; i <= nk; i++) { printf "%-20s", kk[i]; for (v in vs) printf " | %-24s", med(v, kk[i]); printf "\n" }
	}' $(ls "$LOG"/c-*.[0-9]* "$LOG"/courier*.[0-9]* 2>/dev/null)
