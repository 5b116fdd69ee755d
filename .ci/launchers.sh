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

limit=120 # seconds for each launch

die() {
  echo "launchers.sh: $*" >&2
  exit 1
}

# Open MPI's mpirun.
mpirun=mpirun
if ! { command -v "$mpirun" >/dev/null && [[ $("$mpirun" --version 2>&1) == *'Open MPI'* ]]; }; then
  mpirun=mpirun.openmpi
  command -v "$mpirun" >/dev/null || die "no Open MPI mpirun on PATH (apt-get install -y openmpi-bin)"
fi
# MPICH's Hydra.
mpiexec=mpiexec.mpich
command -v "$mpiexec" >/dev/null || die "no mpiexec.mpich on PATH (apt-get install -y mpich)"
[[ $("$mpiexec" --version 2>&1) == *HYDRA* ]] || die "$mpiexec is not MPICH's Hydra"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== build examples/ring (no mpi tag)"
go build -o "$tmp/ring" ./examples/ring
ring="$tmp/ring"

# check NAME N OUT: the ring of N ranks in OUT went round, every rank done.
check() {
  local name=$1 n=$2 out=$3
  local laps done_ranks
  laps=$(grep -c "token went round $n ranks and came back" "$out" || true)
  if [ "$laps" -ne 3 ]; then
    cat "$out"
    die "$name: the token came back $laps times, want 3"
  fi
  for ((r = 0; r < n; r++)); do
    grep -q "rank $r of $n done" "$out" || {
      cat "$out"
      die "$name: rank $r of $n did not finish"
    }
  done
  done_ranks=$(grep -c " of $n done" "$out" || true)
  [ "$done_ranks" -eq "$n" ] || {
    cat "$out"
    die "$name: $done_ranks ranks finished, want $n"
  }
  echo "$name: ok ($laps laps, $n ranks)"
}

# launch NAME N COMMAND...: runs COMMAND with a clean environment and checks
# the ring's output.
launch() {
  local name=$1 n=$2
  shift 2
  local out="$tmp/$name.out" rc=0
  echo "== $name: $*"
  timeout "$limit" env -i PATH="$PATH" HOME="${HOME:-/}" "$@" >"$out" 2>&1 || rc=$?
  cat "$out"
  [ "$rc" -eq 0 ] || die "$name exited with $rc"
  check "$name" "$n" "$out"
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
[ "$failed" -eq 0 ] || die "slurm: a rank failed"
cat "$tmp"/slurm.*.out >"$tmp/slurm.out"
check slurm 3 "$tmp/slurm.out"

echo "== launchers: all passed"
