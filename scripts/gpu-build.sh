#!/usr/bin/env bash
# gpu-build.sh: build the GPU test binaries here (cgo on, linux/amd64) into
# gpu-build/ (untracked), to carry to the GPU machine, which has the CUDA
# driver but no Go.
#
#   scripts/gpu-build.sh          # build every binary listed at the bottom
#   scripts/gpu-build.sh cuda     # build only the binaries named
#
# On the GPU machine, in the folder the binaries were copied to (a test
# binary needs nothing else; COURIER_REQUIRE_GPU=N makes every test that
# needs at most N GPUs fail instead of skipping, so a run cannot pass by
# skipping):
#
#   COURIER_REQUIRE_GPU=2 ./cuda.test -test.v -test.count=1
#
# The NCCL binaries run as 2 ranks under mpirun; docs/gpu.md has the
# commands.
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpu-build
mkdir -p "$out"
export CGO_ENABLED=1 GOOS=linux GOARCH=amd64

# build NAME PKG: compile the tests of package PKG into $out/NAME.test,
# or, when PKG is a command (package main), the command into $out/NAME.
build() {
	local name=$1 pkg=$2
	if [ "$(go list -f '{{.Name}}' "$pkg")" = main ]; then
		go build -o "$out/$name" "$pkg"
		echo "built $out/$name ($pkg)"
		return
	fi
	go test -c -o "$out/$name.test" "$pkg"
	echo "built $out/$name.test ($pkg)"
}

# The binaries, as NAME PKG. Add a line per package.
binaries=(
	"cuda ./cuda/"
	"nccl ./backend/nccl/"
	"proctest ./internal/conformance/proctest/"
	"pingpong ./examples/pingpong/"
	"courier ./cmd/courier/"
	"mp ./mp/"
	"jacobi ./examples/jacobi/"
	"overlap ./examples/seed/overlap/"
	"strategy ./examples/seed/strategy/"
	"work ./examples/seed/internal/work/"
)

for arg in "$@"; do
	if [[ " ${binaries[*]%% *} " != *" $arg "* ]]; then
		echo "gpu-build.sh: no binary named $arg (have: ${binaries[*]%% *})" >&2
		exit 2
	fi
done
for b in "${binaries[@]}"; do
	read -r name pkg <<<"$b"
	if [ $# -eq 0 ] || [[ " $* " == *" $name "* ]]; then
		build "$name" "$pkg"
	fi
done
