#!/usr/bin/env bash
# gpu-run.sh: run the GPU tests, examples and benchmarks on the GPU machine
# (2 GPUs, Open MPI, CUDA, NCCL; no Go), from the repository root, with the
# binaries scripts/gpu-build.sh made in gpu-build/:
#
#   bash scripts/gpu-run.sh [LOGDIR]      # default LOGDIR: gpu-build/logs
#   ONLY='nccl|bench' bash scripts/gpu-run.sh   # only the steps whose names match
#   NP=4 ONLY='^(info|nccl|proctest)' bash scripts/gpu-run.sh
#                                          # those steps as 4 ranks (4 GPUs)
#   TARBALL=/out/logs.tgz bash scripts/gpu-run.sh /tmp/logs
#                                          # also keep every log in one tarball,
#                                          # rewritten after each step
#
# Every step runs under a time limit and the script goes on after a
# failure; it prints one line per step and ends with the failed ones (exit
# status 1 if any). The logs of every step are in LOGDIR. NCCL_NVLS_ENABLE=0
# is set in every process (NVLink SHARP is not available on that machine).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=$PWD/gpu-build
LOG=${1:-$B/logs}
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0
M=(mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0)
# NP ranks (one GPU each) for the steps that take any number of ranks
# (info, nccl, proctest-*); the others are two-rank programs.
NP=${NP:-2}
if ! [[ $NP =~ ^[1-9][0-9]*$ ]]; then
	echo "gpu-run.sh: NP must be a number of ranks, not '$NP'" >&2
	exit 2
fi
MN=(mpirun --allow-run-as-root -np "$NP" -x NCCL_NVLS_ENABLE=0)
failed=()

# step NAME LIMIT CMD...: run CMD with a time limit, its output in
# $LOG/NAME.log.
step() {
	local name=$1 limit=$2
	shift 2
	if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then
		return 0
	fi
	local start=$SECONDS
	timeout --kill-after=10 "$limit" "$@" >"$LOG/$name.log" 2>&1
	local rc=$?
	printf '%-28s rc=%-3d %4ds\n' "$name" "$rc" $((SECONDS - start)) | tee -a "$LOG/steps.txt"
	if [ -n "${TARBALL:-}" ]; then
		tar czf "$TARBALL" -C "$LOG" . 2>/dev/null
	fi
	if [ "$rc" -ne 0 ]; then
		failed+=("$name")
	fi
	return 0
}

# The C + NCCL floors, built here (mpicc; the CUDA and NCCL headers of the
# machine): point to point (p2p) and the collectives (coll, which
# scripts/gpu-coll.sh runs beside courier's).
CUDA=${CUDA_HOME:-/usr/local/cuda}
step p2p-build 120 mpicc -O2 -o "$B/p2p" bench/nccl/p2p.c -I"$CUDA/include" -L"$CUDA/lib64" -lcudart -lnccl -ldl
step coll-build 120 mpicc -O2 -o "$B/coll" bench/nccl/coll.c -I"$CUDA/include" -L"$CUDA/lib64" -lcudart -lnccl

cd "$B" || exit 1
step info 30 "${MN[@]}" ./courier info
# Where the NCCL backend's time goes, first: courier's ping-pong with
# COURIER_NCCL_TRACE=1 (each rank prints at Close where each group's time
# went), and the C program laid out as courier is (a communicator per
# direction, every operation grouped and polled on an event).
step trace 60 "${M[@]}" -x COURIER_BACKEND=nccl -x COURIER_NCCL_TRACE=1 ./pingpong -device -iters 200 -max 65536
step bench-c-twocomms 120 "${M[@]}" ./p2p -group -twocomms
step cuda 300 env COURIER_REQUIRE_GPU=2 ./cuda.test -test.v -test.count=1
step nccl 240 "${MN[@]}" -x COURIER_REQUIRE_GPU="$NP" ./nccl.test -test.run '^TestGPU' -test.v -test.count=1 -test.timeout 230s
# Every rank on GPU 0: the collectives of device buffers that package mp
# runs on the device, over the CUDA IPC path.
step nccl-shared 240 "${MN[@]}" -x COURIER_DEVICE=0 -x COURIER_REQUIRE_GPU="$NP" \
	./nccl.test -test.run '^TestGPU(CombineKernels|IPCCollectives)$' -test.v -test.count=1 -test.timeout 230s
step proctest-nccl-checked 420 "${MN[@]}" -x COURIER_REQUIRE_GPU="$NP" -x COURIER_BACKEND=nccl -x COURIER_CHECK=1 \
	./proctest.test -test.run TestConformanceProcesses -test.v -test.timeout 400s
# Without checks the cases of backend/nccl's needsChecks fail by design
# (3 s each with COURIER_TIMEOUT=3s); the log lists them (grep ^FAIL or
# "--- FAIL").
step proctest-nccl-unchecked 420 "${MN[@]}" -x COURIER_BACKEND=nccl -x COURIER_CHECK=0 -x COURIER_TIMEOUT=3s \
	./proctest.test -test.run TestConformanceProcesses -test.v -test.timeout 400s
for b in tcp nccl; do
	for mem in host device stream; do
		args=(-verify)
		case $mem in
		device) args+=(-device) ;;
		stream) args+=(-device -stream) ;;
		esac
		step "pingpong-$b-$mem" 60 "${M[@]}" -x COURIER_BACKEND=$b ./pingpong "${args[@]}"
	done
done
# The digests must be the same for every backend and memory.
if [ -n "${ONLY:-}" ] && ! [[ pingpong =~ $ONLY ]]; then
	:
elif [ "$(cat "$LOG"/pingpong-*.log | grep -c .)" -gt 0 ] &&
	[ "$(for f in "$LOG"/pingpong-*.log; do md5sum <"$f"; done | sort -u | wc -l)" -eq 1 ]; then
	echo "pingpong digests: all equal"
else
	echo "pingpong digests: DIFFER"
	failed+=(pingpong-digests)
fi

# The benchmark beside the C program: 5 rounds of each, interleaved, and
# the table of medians and ratios (scripts/gpu-compare.sh); then courier
# from host memory (staged through page-locked memory).
# shellcheck disable=SC2054 # the commas separate sizes within one argument
sizes=(-lat 8,128k -bw 2m,32m,128m,512m)
step compare 400 env B="$B" bash "$B/../scripts/gpu-compare.sh" 5 "$LOG/compare"
# The collectives beside the same calls in C (bench/nccl/coll.c) on NP
# ranks: 3 rounds, interleaved (scripts/gpu-coll.sh).
step coll-compare 600 env B="$B" NP="$NP" bash "$B/../scripts/gpu-coll.sh" 3 "$LOG/coll-compare"
step bench-nccl-host 150 "${M[@]}" -x COURIER_BACKEND=nccl -x COURIER_TIMEOUT=30s ./courier bench -pattern stream "${sizes[@]}"
# Why the channels are blocking communicators: NCCL's non-blocking ones,
# from C and from courier (about 4 ms per group in NCCL 2.28).
step bench-c-nonblocking 120 "${M[@]}" ./p2p -nonblocking
step trace-nonblocking 60 "${M[@]}" -x COURIER_BACKEND=nccl -x COURIER_NCCL_TRACE=1 -x COURIER_NCCL_BLOCKING=0 ./pingpong -device -iters 20 -max 64
for f in info trace bench-c-twocomms bench-nccl-host bench-c-nonblocking trace-nonblocking; do
	[ -f "$LOG/$f.log" ] || continue
	echo "== $f"
	grep -E '^(#|kind|init|latency|bandwidth|courier nccl trace| +[0-9]+ +[0-9.]+ +[0-9.]+$|launcher|backend|COURIER|cuda|nccl| +cuda:)' "$LOG/$f.log"
done
for t in compare coll-compare; do
	if [ -f "$LOG/$t/table.md" ]; then
		echo "== $t"
		cat "$LOG/$t/table.md"
	fi
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "ALL PASSED"
