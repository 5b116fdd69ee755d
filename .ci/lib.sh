# shellcheck shell=bash
# shellcheck disable=SC2154 # me is the script's
# lib.sh: what .ci/launchers.sh and .ci/mpi-launchers.sh share, sourced by
# both (it is not run by itself). Each sets me (its name, for messages)
# before calling anything here.

# fail MESSAGE: the script fails, saying why.
fail() {
  echo "$me: FAIL: $*" >&2
  exit 1
}

# openmpi_mpirun PACKAGES: mpirun, Open MPI's launcher: "mpirun" may be
# MPICH's when both are installed, and Open MPI's is then mpirun.openmpi.
# Fails, naming the Debian PACKAGES to install, when there is none.
openmpi_mpirun() {
  local m
  for m in mpirun mpirun.openmpi; do
    if command -v "$m" >/dev/null && [[ $("$m" --version 2>&1) == *'Open MPI'* ]]; then
      # shellcheck disable=SC2034 # for the script
      mpirun=$m
      return
    fi
  done
  fail "no Open MPI mpirun on PATH (apt-get install -y $1)"
}

# check_ring NAME N OUT: the ring of N ranks whose output is OUT went
# round 3 times and each of its ranks finished, once.
check_ring() {
  local name=$1 n=$2 out=$3 laps r done_ranks
  laps=$(grep -c "token went round $n ranks and came back" "$out" || true)
  [ "$laps" -eq 3 ] || fail "$name: the token came back $laps times, want 3"
  for ((r = 0; r < n; r++)); do
    grep -q "^rank $r of $n done" "$out" || fail "$name: rank $r of $n did not finish"
  done
  done_ranks=$(grep -c "^rank [0-9]* of $n done" "$out" || true)
  [ "$done_ranks" -eq "$n" ] || fail "$name: $done_ranks ranks finished, want $n"
  echo "-- $name: ok ($laps laps, $n ranks done)"
}
