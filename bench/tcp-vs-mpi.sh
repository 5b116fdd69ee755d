#!/usr/bin/env bash
# tcp-vs-mpi.sh: courier's TCP backend beside Open MPI's TCP transport,
# point-to-point, 2 ranks on loopback, interleaved:
#   bash bench/tcp-vs-mpi.sh [rounds]
# What bench/host-compare.sh does for those two systems alone (it takes
# the same flags; see bash bench/host-compare.sh -h).
set -euo pipefail
exec bash "$(dirname "$0")/host-compare.sh" -systems courier-tcp,ompi-tcp -no-coll "$@"
