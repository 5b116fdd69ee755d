#!/usr/bin/env bash
# host-compare.sh: courier's host transports beside MPI's on this machine,
# in one run, interleaved round by round.
#
#   bash bench/host-compare.sh [-o DIR] [flags] [ROUNDS]
#
# Builds courier (or takes $COURIER_BIN) and bench/mpi/{p2p,coll}.c (with mpicc.openmpi and
# mpicc.mpich), then, ROUNDS times (default 2), runs each system in turn,
# point-to-point between 2 ranks:
#
#   courier-tcp   COURIER_BACKEND=tcp courier bench (loopback)
#   courier-shm   courier's shared-memory transport: COURIER_BACKEND=host
#                 COURIER_TRANSPORTS=shm, or COURIER_TRANSPORTS=shm where
#                 courier info names shm; skipped, with a message, while a
#                 dry run shows that courier has neither
#   ompi-tcp      Open MPI, mpirun --mca pml ob1 --mca btl self,tcp
#                 --mca btl_tcp_if_include lo
#   ompi-vader    Open MPI shared memory, --mca pml ob1 --mca btl self,vader
#   mpich-tcp     MPICH (over UCX), UCX_TLS=tcp,self UCX_NET_DEVICES=lo
#   mpich-shm     MPICH shared memory, UCX_TLS=self,sm
#
# then the same for the collectives on each rank count of -ranks
# (courier bench -coll beside bench/mpi/coll.c). MPICH is left out where
# the ranks outnumber the cores: it polls without ever yielding, and on 4
# ranks on 2 cores an 8-byte MPI_Allreduce took 13-27 ms (over UCX's TCP
# transport it did not finish).
#
# At the end it prints, per size, the median over the rounds of each
# system and the ratios courier / each other system (latency and time per
# call: courier's time divided by the other's, below 1 is faster;
# bandwidth: courier's divided by the other's, above 1 is faster), as
# Markdown (courier plot -median -table), and writes into DIR (-o, else
# $OUT, else a new directory under /tmp): every run's JSON document
# (p2p-SYSTEM-rROUND.json, coll-NP-SYSTEM-rROUND.json), every run's table
# (runs.log), the plots (p2p.svg, coll-NPranks.svg: all systems on the same
# axes) and the printed tables (summary.md).
#
# Flags (defaults in brackets):
#   -o DIR            output directory [$OUT, else mktemp -d]
#   -systems LIST     comma-separated systems from the list above [all]
#   -lat SIZES        latency sizes [1,4k,64k,1m]
#   -bw SIZES         bandwidth sizes [4k,64k,1m,4m,64m]
#   -coll LIST        collectives [allreduce,bcast,allgather,alltoall]
#   -collsizes SIZES  collective sizes [8,1k,64k,1m,16m]
#   -ranks LIST       rank counts for the collectives, comma-separated [2,4]
#   -reps N           figures per row, the median kept [3]
#   -timeout SECONDS  limit for one run: then it is reported, and left out
#                     unless it had written its whole document [300]
#   -no-p2p, -no-coll leave out the point-to-point or the collective part
#
# Needs Go, and apt-get install openmpi-bin libopenmpi-dev mpich; a system
# whose MPI is missing is skipped with a message.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

rounds=2
outdir=${OUT:-}
systems=courier-tcp,courier-shm,ompi-tcp,ompi-vader,mpich-tcp,mpich-shm
lat=1,4k,64k,1m
bw=4k,64k,1m,4m,64m
colls=allreduce,bcast,allgather,alltoall
collsizes=8,1k,64k,1m,16m
ranklist=2,4
reps=3
limit=300
p2p=1
coll=1
while [ $# -gt 0 ]; do
  case $1 in
    -h | -help | --help) usage; exit 0 ;;
    -no-p2p) p2p=0; shift; continue ;;
    -no-coll) coll=0; shift; continue ;;
    -o | -systems | -lat | -bw | -coll | -collsizes | -ranks | -reps | -timeout)
      if [ $# -lt 2 ]; then
        echo "host-compare.sh: $1 needs a value" >&2
        exit 2
      fi ;;
    -*) echo "host-compare.sh: unknown flag $1 (see -h)" >&2; exit 2 ;;
    *)
      if ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
        echo "host-compare.sh: ROUNDS must be a positive number, not $1" >&2
        exit 2
      fi
      rounds=$1; shift; continue ;;
  esac
  case $1 in
    -o) outdir=$2 ;;
    -systems) systems=$2 ;;
    -lat) lat=$2 ;;
    -bw) bw=$2 ;;
    -coll) colls=$2 ;;
    -collsizes) collsizes=$2 ;;
    -ranks) ranklist=$2 ;;
    -reps) reps=$2 ;;
    -timeout) limit=$2 ;;
  esac
  shift 2
done

for sys in ${systems//,/ }; do
  case $sys in
    courier-tcp | courier-shm | ompi-tcp | ompi-vader | mpich-tcp | mpich-shm) ;;
    *) echo "host-compare.sh: unknown system $sys (see -h)" >&2; exit 2 ;;
  esac
done
if [ -z "$outdir" ]; then
  outdir=$(mktemp -d /tmp/host-compare.XXXXXX)
fi
mkdir -p "$outdir/bin"
outdir=$(cd "$outdir" && pwd) # before the cd below: DIR is the caller's
cd "$(dirname "$0")/.."
bin=$outdir/bin
log=$outdir/runs.log
: >"$log"
cores=$(nproc)

say() { echo "host-compare: $*" >&2; }

want() { [[ ",$systems," == *",$1,"* ]]; }

# The programs.
# COURIER_BIN names a courier binary built elsewhere (a machine with no Go).
if [ -n "${COURIER_BIN:-}" ]; then
  say "courier from $COURIER_BIN; building bench/mpi into $bin"
  cp "$COURIER_BIN" "$bin/courier"
else
  say "building courier and bench/mpi into $bin"
  go build -o "$bin/courier" ./cmd/courier
fi
have_ompi=0
have_mpich=0
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null; then
  mpicc.openmpi -O2 -o "$bin/p2p.openmpi" bench/mpi/p2p.c
  mpicc.openmpi -O2 -o "$bin/coll.openmpi" bench/mpi/coll.c
  have_ompi=1
elif want ompi-tcp || want ompi-vader; then
  say "Open MPI skipped: no mpicc.openmpi and mpirun.openmpi (apt-get install openmpi-bin libopenmpi-dev)"
fi
mpiexec_mpich=$(command -v mpiexec.mpich || command -v mpirun.mpich || true)
if command -v mpicc.mpich >/dev/null && [ -n "$mpiexec_mpich" ]; then
  mpicc.mpich -O2 -o "$bin/p2p.mpich" bench/mpi/p2p.c
  mpicc.mpich -O2 -o "$bin/coll.mpich" bench/mpi/coll.c
  have_mpich=1
elif want mpich-tcp || want mpich-shm; then
  say "MPICH skipped: no mpicc.mpich and mpiexec.mpich (apt-get install mpich)"
fi
ompi=(mpirun.openmpi --oversubscribe)
if [ "$(id -u)" = 0 ]; then
  ompi+=(--allow-run-as-root)
fi

# courier's shared-memory transport, where courier has one: the first of
# these settings with which a tiny run succeeds.
shm_env=()
if want courier-shm; then
  why=""
  if env COURIER_BACKEND=host COURIER_TRANSPORTS=shm timeout 60 "$bin/courier" bench -reps 1 -lat 1 -bw 4k -window 2 >/dev/null 2>"$outdir/shm-dry-run.err"; then
    shm_env=(COURIER_BACKEND=host COURIER_TRANSPORTS=shm)
  else
    why=$(head -n 1 "$outdir/shm-dry-run.err")
    if "$bin/courier" info 2>/dev/null | grep -qw shm &&
      env COURIER_TRANSPORTS=shm timeout 60 "$bin/courier" bench -reps 1 -lat 1 -bw 4k -window 2 >/dev/null 2>>"$outdir/shm-dry-run.err"; then
      shm_env=(COURIER_TRANSPORTS=shm)
    fi
  fi
  if [ ${#shm_env[@]} -eq 0 ]; then
    say "courier-shm skipped: courier has no shared-memory transport yet (COURIER_BACKEND=host COURIER_TRANSPORTS=shm: ${why:-failed}; courier info names no shm)"
  else
    say "courier-shm: ${shm_env[*]}"
  fi
fi

# available SYSTEM NP: whether SYSTEM can run NP ranks here.
available() {
  want "$1" || return 1
  case $1 in
    courier-tcp) return 0 ;;
    courier-shm) [ ${#shm_env[@]} -gt 0 ] ;;
    ompi-*) [ "$have_ompi" = 1 ] ;;
    mpich-*) [ "$have_mpich" = 1 ] && [ "$2" -le "$cores" ] ;;
    *) return 1 ;;
  esac
}

# label SYSTEM: the system's name in the tables and plots.
label() {
  case $1 in
    courier-tcp) echo "courier tcp" ;;
    courier-shm) echo "courier shm" ;;
    ompi-tcp) echo "Open MPI TCP" ;;
    ompi-vader) echo "Open MPI vader" ;;
    mpich-tcp) echo "MPICH TCP" ;;
    mpich-shm) echo "MPICH shm" ;;
  esac
}

# command SYSTEM NP PROGRAM: sets cmd to the command line that runs
# PROGRAM (p2p or coll for the MPI systems; courier bench for courier) as
# NP ranks of SYSTEM, before the program's own arguments.
command_for() {
  local sys=$1 np=$2 prog=$3
  case $sys in
    courier-tcp) cmd=(env COURIER_BACKEND=tcp "$bin/courier" bench -np "$np") ;;
    courier-shm) cmd=(env "${shm_env[@]}" "$bin/courier" bench -np "$np") ;;
    ompi-tcp) cmd=("${ompi[@]}" -np "$np" --mca pml ob1 --mca btl "self,tcp" --mca btl_tcp_if_include lo
      "$bin/$prog.openmpi" -transport tcp) ;;
    ompi-vader) cmd=("${ompi[@]}" -np "$np" --mca pml ob1 --mca btl "self,vader" "$bin/$prog.openmpi" -transport vader) ;;
    mpich-tcp) cmd=(env "UCX_TLS=tcp,self" UCX_NET_DEVICES=lo "$mpiexec_mpich" -n "$np" "$bin/$prog.mpich" -transport tcp) ;;
    mpich-shm) cmd=(env "UCX_TLS=self,sm" "$mpiexec_mpich" -n "$np" "$bin/$prog.mpich" -transport shm) ;;
  esac
}

# measure SYSTEM NP KIND JSON: one run (KIND p2p or coll), its table
# appended to the log, its document written to JSON.
measure() {
  local sys=$1 np=$2 kind=$3 json=$4 start
  local -a args cmd
  if [ "$kind" = p2p ]; then
    args=(-reps "$reps" -lat "$lat" -bw "$bw")
  elif [[ $sys == courier-* ]]; then
    args=(-reps "$reps" -coll "$colls" -collsizes "$collsizes")
  else
    args=(-reps "$reps" -coll "$colls" -sizes "$collsizes")
  fi
  command_for "$sys" "$np" "$kind"
  start=$SECONDS
  echo "## $sys, $kind, $np ranks: ${cmd[*]} ${args[*]}" >>"$log"
  rm -f "$json"
  if timeout "$limit" "${cmd[@]}" "${args[@]}" -label "$(label "$sys")" -json "$json" >>"$log" 2>&1; then
    say "$sys $kind, $np ranks: $((SECONDS - start)) s"
  elif [ -s "$json" ] && "$bin/courier" plot -table "$json" >/dev/null 2>&1; then
    # Seen with MPICH over UCX's TCP transport on a loaded machine: every
    # row measured and written, then MPI_Finalize never returned.
    say "$sys $kind, $np ranks: did not exit within ${limit} s, after writing a complete document (kept; see $log)"
    echo "## (did not exit within ${limit} s; its document is complete)" >>"$log"
  else
    say "$sys $kind, $np ranks: FAILED after $((SECONDS - start)) s (see $log); left out"
    rm -f "$json"
  fi
}

# runs PREFIX: sets files to the documents PREFIX-SYSTEM-rROUND.json
# there are, in the order of -systems, then of the rounds.
runs() {
  local sys r
  files=()
  for sys in ${systems//,/ }; do
    for r in $(seq "$rounds"); do
      if [ -s "$outdir/$1-$sys-r$r.json" ]; then
        files+=("$outdir/$1-$sys-r$r.json")
      fi
    done
  done
}

summary=$outdir/summary.md
: >"$summary"
{
  echo "# host-compare.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname), $cores cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
} >>"$summary"

if [ "$p2p" = 1 ]; then
  for r in $(seq "$rounds"); do
    for sys in ${systems//,/ }; do
      if available "$sys" 2; then
        measure "$sys" 2 p2p "$outdir/p2p-$sys-r$r.json"
      fi
    done
  done
  runs p2p
  if [ ${#files[@]} -gt 0 ]; then
    {
      echo "## point-to-point, 2 ranks, $rounds rounds"
      echo
      "$bin/courier" plot -median -table -title "2 ranks" -o "$outdir/p2p.svg" "${files[@]}"
    } | tee -a "$summary"
  fi
fi

if [ "$coll" = 1 ]; then
  for r in $(seq "$rounds"); do
    for np in ${ranklist//,/ }; do
      for sys in ${systems//,/ }; do
        if available "$sys" "$np"; then
          measure "$sys" "$np" coll "$outdir/coll-$np-$sys-r$r.json"
        elif [[ $sys == mpich-* ]] && want "$sys" && [ "$have_mpich" = 1 ] && [ "$r" = 1 ]; then
          say "$sys coll, $np ranks: skipped ($np ranks on $cores cores: MPICH polls without yielding)"
        fi
      done
    done
  done
  for np in ${ranklist//,/ }; do
    runs "coll-$np"
    if [ ${#files[@]} -gt 0 ]; then
      {
        echo "## collectives, $np ranks, $rounds rounds"
        echo
        "$bin/courier" plot -median -table -title "$np ranks" -o "$outdir/coll-${np}ranks.svg" "${files[@]}"
      } | tee -a "$summary"
    fi
  done
fi
say "JSON documents, plots and summary.md in $outdir"
