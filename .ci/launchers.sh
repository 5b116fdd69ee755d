#!/usr/bin/env bash
# Runs examples/ring, built without -tags mpi, under the launchers users
# already have: Open MPI's mpirun, MPICH's mpiexec (Hydra), and a hand-made
# Slurm environment. The ranks meet with no COURIER_ADDR: rank 0 publishes
# its rendezvous address in a file keyed by the launcher's job ID.
#
# Installs nothing. Needs on PATH: go, mpirun (Open MPI; mpirun.openmpi is
# used when mpirun is another MPI's) and mpiexec.mpich (MPICH's Hydra). On
# Debian: apt-get install -y openmpi-bin mpich
#
# Each launcher runs under `env -i` with only PATH and HOME, so neither MPI
# sees the other's variables (nor any OMPI_*, PMI_*, SLURM_* or COURIER_*
# of the caller's); the Slurm ranks get only SLURM_PROCID, SLURM_NTASKS,
# SLURM_LOCALID and SLURM_JOB_ID.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

me=launchers.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source .ci/lib.sh

limit=120 # seconds for each launch

openmpi_mpirun openmpi-bin
# MPICH's Hydra.
mpiexec=mpiexec.mpich
command -v "$mpiexec" >/dev/null || fail "no mpiexec.mpich on PATH (apt-get install -y mpich)"
[[ $("$mpiexec" --version 2>&1) == *HYDRA* ]] || fail "$mpiexec is not MPICH's Hydra"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== build examples/ring (no mpi tag)"
go build -o "$tmp/ring" ./examples/ring
ring="$tmp/ring"

# launch NAME N COMMAND...: runs COMMAND with a clean environment and checks
# the ring's output.
launch() {
  local name=$1 n=$2
  shift 2
  local out="$tmp/$name.out" rc=0
  echo "== $name: $*"
  timeout "$limit" env -i PATH="$PATH" HOME="${HOME:-/}" "$@" >"$out" 2>&1 || rc=$?
  cat "$out"
  [ "$rc" -eq 0 ] || fail "$name exited with $rc"
  check_ring "$name" "$n" "$out"
}

launch openmpi 4 "$mpirun" --allow-run-as-root --oversubscribe -np 4 "$ring"
launch mpich 4 "$mpiexec" -np 4 "$ring"

echo "== slurm: 3 processes given only SLURM_PROCID/NTASKS/LOCALID/JOB_ID"
job="ci-$$-$RANDOM"
pids=()
for r in 0 1 2; do
  timeout "$limit" env -i SLURM_PROCID=$r SLURM_NTASKS=3 SLURM_LOCALID=$r SLURM_JOB_ID="$job" \
    "$ring" >"$tmp/slurm.$r.out" 2>&1 &
  pids+=($!)
done
failed=0
for r in 0 1 2; do
  rc=0
  wait "${pids[$r]}" || rc=$?
  sed "s/^/[$r] /" "$tmp/slurm.$r.out"
  if [ "$rc" -ne 0 ]; then
    echo "slurm: rank $r exited with $rc" >&2
    failed=1
  fi
done
[ "$failed" -eq 0 ] || fail "slurm: a rank failed"
cat "$tmp"/slurm.*.out >"$tmp/slurm.out"
check_ring slurm 3 "$tmp/slurm.out"

echo "== launchers: all passed"
