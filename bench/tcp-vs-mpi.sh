#!/usr/bin/env bash
# Runs courier's TCP backend and Open MPI's TCP transport side by side on
# this machine, interleaved, 2 ranks each, both on loopback:
#   bash bench/tcp-vs-mpi.sh [rounds]
# Needs Go and Open MPI (apt-get install openmpi-bin libopenmpi-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/courier" ./cmd/courier
mpicc -O2 -o "$out/p2p" bench/mpi/p2p.c
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
for i in $(seq "$rounds"); do
  echo "## round $i"
  COURIER_BACKEND=tcp "$out/courier" bench
  mpirun "${root[@]}" --oversubscribe -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca pml ob1 "$out/p2p"
done
