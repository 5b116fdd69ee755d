package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/internal/bench"
	"github.com/courier-mp/courier/internal/launch"
	"github.com/courier-mp/courier/mp"
)

const benchUsage = `usage: courier bench [-reps N] [-lat SIZES] [-bw SIZES] [-window N] [-pattern osu|stream] [-device] [-cpuprofile FILE]
       courier bench -coll LIST [-collsizes SIZES] [-reps N] [-device] [-np N]

Measures point-to-point latency (half a blocking ping-pong) and bandwidth
between ranks 0 and 1, with the backend COURIER_BACKEND names, and prints
how long Init took and the heap allocations per message. Bandwidth is, with
-pattern osu (the default), windows of non-blocking sends, each
acknowledged (as the OSU benchmarks measure MPI); with -pattern stream, one
run of back-to-back sends (as bench/nccl/p2p.c measures NCCL). -device
sends GPU memory (the rank's GPU) instead of host memory. -cpuprofile
writes each rank's CPU profile of the measurements to FILE.rankN (for go
tool pprof).

With -coll, it measures collectives instead, on every rank: LIST names
some of allreduce, allgather, alltoall, reducescatter, bcast; float32
elements, Sum; each call waited for (the blocking API); the time per call
of the slowest rank, the algorithm bandwidth (bytes / time) and the bus
bandwidth (times 2(N-1)/N for allreduce, (N-1)/N for allgather, alltoall
and reducescatter, 1 for bcast), as bench/nccl/coll.c prints them for C.
SIZES are per call: allreduce's and bcast's buffer, allgather's receive
buffer, alltoall's and reducescatter's send buffer.

Started alone, it runs itself as -np ranks (default 2) with courier run;
started by a launcher (courier run, mpirun, srun), it is one rank of that
job. SIZES are comma-separated byte counts (4096, 64k, 1m).
`

// selfCommand returns the command line that runs this courier binary
// (tests replace it: their binary needs a marker argument).
var selfCommand = func() ([]string, error) {
	exe, err := os.Executable()
	return []string{exe}, err
}

// bench is courier bench.
func (a *app) bench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { io.WriteString(a.stderr, benchUsage) }
	cfg := bench.Default()
	reps := fs.Int("reps", cfg.Reps, "measurements per figure (the median is printed)")
	window := fs.Int("window", cfg.Window, "sends in flight per bandwidth window")
	lat := fs.String("lat", joinSizes(cfg.LatencySizes), "latency sizes")
	bw := fs.String("bw", joinSizes(cfg.BandwidthSizes), "bandwidth sizes")
	pattern := fs.String("pattern", "osu", "bandwidth pattern: osu or stream")
	device := fs.Bool("device", false, "send GPU memory instead of host memory")
	cpuProfile := fs.String("cpuprofile", "", "write each rank's CPU profile of the measurements to `FILE`.rankN")
	coll := fs.String("coll", "", "measure these collectives (comma-separated) instead of point-to-point")
	collSizes := fs.String("collsizes", "8,128k,2m,32m,128m,512m", "collective sizes")
	np := fs.Int("np", 2, "ranks to run, when started alone")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.LatencySizes, err = parseSizes(*lat); err == nil {
		cfg.BandwidthSizes, err = parseSizes(*bw)
	}
	if err == nil && !slices.Contains(bench.Patterns, *pattern) {
		err = fmt.Errorf("unknown pattern %q (have %s)", *pattern, strings.Join(bench.Patterns, ", "))
	}
	collCfg := bench.CollConfig{Reps: *reps, Device: *device}
	if err == nil && *coll != "" {
		for _, k := range strings.Split(*coll, ",") {
			if k = strings.TrimSpace(k); !slices.Contains(bench.Collectives, k) {
				err = fmt.Errorf("unknown collective %q (have %s)", k, strings.Join(bench.Collectives, ", "))
				break
			}
			collCfg.Kinds = append(collCfg.Kinds, k)
		}
		if err == nil {
			collCfg.Sizes, err = parseSizes(*collSizes)
		}
	}
	if err != nil || *reps < 1 || *window < 1 || *np < 1 || fs.NArg() > 0 {
		if err != nil {
			fmt.Fprintln(a.stderr, "courier bench:", err)
		}
		io.WriteString(a.stderr, benchUsage)
		return 2
	}
	cfg.Reps, cfg.Window, cfg.Pattern, cfg.Device = *reps, *window, *pattern, *device

	// FromEnv, not Detect: rank 0's inherited socket is for mp.Init.
	job, err := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	if job.Size == 1 {
		// Not in a job: become one of two ranks.
		self, err := selfCommand()
		if err != nil {
			fmt.Fprintln(a.stderr, "courier bench:", err)
			return 1
		}
		sigs, stop := a.signals()
		defer stop()
		res := launch.Run(context.Background(), launch.Config{
			NP: *np, Program: self[0], Args: append(append(self[1:], "bench"), args...),
			Stdout: a.stdout, Stderr: a.stderr, NoPrefix: true, Signals: sigs,
		})
		return res.ExitCode
	}
	start := time.Now()
	comm, err := mp.Init(context.Background())
	initTime := time.Since(start)
	if err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	defer comm.Close()
	if comm.Rank() == 0 && *coll == "" {
		bench.Header(a.stdout, comm.Backend(), cfg, initTime)
	}
	if comm.Rank() == 0 && *coll != "" {
		bench.CollHeader(a.stdout, comm.Backend(), comm.Size(), collCfg, initTime)
	}
	if *cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.rank%d", *cpuProfile, comm.Rank()))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(a.stderr, "courier bench: -cpuprofile:", err)
			return 1
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if *coll != "" {
		_, err = bench.RunColl(comm, collCfg, func(r bench.CollRow) { bench.PrintCollRow(a.stdout, r) })
	} else {
		_, err = bench.Run(comm, cfg, func(r bench.Row) { bench.PrintRow(a.stdout, r) })
	}
	if err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	if err := comm.Close(); err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	return 0
}

func joinSizes(s []int) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// parseSizes reads "1,4k,1m".
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"):
			mult, f = 1<<10, strings.TrimSuffix(f, "k")
		case strings.HasSuffix(f, "m"):
			mult, f = 1<<20, strings.TrimSuffix(f, "m")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > (1<<31)/mult {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}
