#!/usr/bin/env bash
# courier under Open MPI's mpirun, built with and without -tags mpi.
#
#   - examples/ring built both ways runs as 4 ranks under mpirun;
#   - the -tags mpi ring started alone with OMPI_COMM_WORLD_SIZE=4 (a
#     launcher's variable, but no launcher) fails with the clear error, and
#     started alone with a clean environment runs as MPI's singleton;
#   - bootstrap's -tags mpi tests pass under mpirun -np 4 and alone;
#   - -tags mpi with CGO_ENABLED=0 fails to build with an error naming the
#     problem.
#
# CI calls it after installing Open MPI (Debian: apt-get install -y
# openmpi-bin libopenmpi-dev; pkg-config ompi must work). It installs
# nothing. Every launch runs under `env -i` with only PATH and HOME (and the
# variables it is about), so that nothing of the caller's environment (an
# OMPI_*, PMI_*, SLURM_* or COURIER_* variable) decides the outcome, and
# under `timeout`, so that a hang fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

me=mpi-launchers.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source .ci/lib.sh

limit=120 # seconds for each launch

openmpi_mpirun "openmpi-bin libopenmpi-dev"
pkg-config --exists ompi || fail "pkg-config cannot find ompi (apt-get install -y libopenmpi-dev)"
v=$("$mpirun" --version 2>&1)
echo "== ${v%%$'\n'*} ($(command -v "$mpirun"))"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# clean COMMAND...: runs COMMAND with PATH, HOME and nothing else, bounded
# by $limit. Single-copy shared memory (CMA) needs ptrace rights that
# containers often lack; turning it off costs nothing here.
clean() {
  timeout "$limit" env -i PATH="$PATH" HOME="${HOME:-/}" \
    OMPI_MCA_btl_vader_single_copy_mechanism=none "$@"
}

# mpi4 COMMAND...: COMMAND as 4 ranks under Open MPI's mpirun.
mpi4() {
  clean "$mpirun" --allow-run-as-root --oversubscribe -np 4 "$@"
}

# run NAME COMMAND...: runs COMMAND, shows its output, fails on its failure;
# the output is left in $tmp/NAME.out.
run() {
  local name=$1 rc=0
  shift
  echo "== $name: $*"
  "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  cat "$tmp/$name.out"
  [ "$rc" -eq 0 ] || fail "$name: exited with $rc"
}

echo "== build examples/ring with and without -tags mpi, and bootstrap's -tags mpi tests"
go build -o "$tmp/ring" ./examples/ring
go build -tags mpi -o "$tmp/ring-mpi" ./examples/ring
go test -c -tags mpi -o "$tmp/bootstrap-mpi.test" ./bootstrap/

# MPI itself gives the ranks and carries the bootstrap's all-gather.
run ring-mpi mpi4 "$tmp/ring-mpi"
check_ring ring-mpi 4 "$tmp/ring-mpi.out"

# No MPI linked: the ranks read Open MPI's variables and find each other on
# this host through the address file rank 0 publishes (bootstrap's
# same-host discovery).
run ring-nompi mpi4 "$tmp/ring"
check_ring ring-nompi 4 "$tmp/ring-nompi.out"

# Linked with MPI, started alone: MPI's singleton is a job of one rank.
run ring-mpi-singleton clean "$tmp/ring-mpi"
check_ring ring-mpi-singleton 1 "$tmp/ring-mpi-singleton.out"

# Linked with MPI, started alone with a launcher's variable: MPI sees 1 rank,
# the environment says 4. That must fail, and say so; never a lone rank 0.
echo "== ring-mpi alone with OMPI_COMM_WORLD_SIZE=4 (must fail)"
rc=0
clean OMPI_COMM_WORLD_SIZE=4 "$tmp/ring-mpi" >"$tmp/alone.out" 2>&1 || rc=$?
cat "$tmp/alone.out"
[ "$rc" -ne 0 ] || fail "ring-mpi alone with OMPI_COMM_WORLD_SIZE=4 succeeded"
[ "$rc" -ne 124 ] || fail "ring-mpi alone with OMPI_COMM_WORLD_SIZE=4 hung"
for want in "bad launcher environment" "one of 4 ranks (OMPI_COMM_WORLD_SIZE=4)" "MPI sees it alone" "-tags mpi"; do
  grep -qF -- "$want" "$tmp/alone.out" || fail "ring-mpi alone: the error does not say \"$want\""
done
! grep -q " of [0-9]* done" "$tmp/alone.out" || fail "ring-mpi alone: a rank ran"
echo "-- ring-mpi alone: failed as it must (exit $rc)"

# The bootstrap's MPI tests, under mpirun and as a singleton. '^TestMPI'
# leaves out tests of the environment alone (such as TestDetectMPICH*),
# which a -tags mpi binary answers from MPI instead.
run test-mpi-np4 mpi4 "$tmp/bootstrap-mpi.test" -test.run '^TestMPI' -test.v
[ "$(grep -c '^PASS$' "$tmp/test-mpi-np4.out")" -eq 4 ] || fail "test-mpi-np4: not every rank passed"
grep -q "Size:4" "$tmp/test-mpi-np4.out" || fail "test-mpi-np4: the ranks did not see a job of 4"
run test-mpi-singleton clean "$tmp/bootstrap-mpi.test" -test.run '^TestMPI' -test.v
grep -q '^PASS$' "$tmp/test-mpi-singleton.out" || fail "test-mpi-singleton: did not pass"

# -tags mpi needs cgo: without it, one compile error that says so.
echo "== go build -tags mpi with CGO_ENABLED=0 (must fail)"
rc=0
CGO_ENABLED=0 go build -tags mpi -o /dev/null ./examples/ring >"$tmp/nocgo.out" 2>&1 || rc=$?
cat "$tmp/nocgo.out"
[ "$rc" -ne 0 ] || fail "-tags mpi built with CGO_ENABLED=0"
grep -q "the_mpi_build_tag_needs_cgo" "$tmp/nocgo.out" || fail "-tags mpi with CGO_ENABLED=0: not the error that names the problem"

echo "== mpi-launchers: all passed"
