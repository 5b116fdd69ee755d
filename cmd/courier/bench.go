package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/internal/bench"
	"github.com/courier-mp/courier/internal/bench/chart"
	"github.com/courier-mp/courier/internal/launch"
	"github.com/courier-mp/courier/mp"
)

const benchUsage = `usage: courier bench [flags]
       courier bench -coll LIST [flags]

Measures point-to-point latency (half a blocking ping-pong) and bandwidth
between ranks 0 and 1, with the backend COURIER_BACKEND names, and prints
how long Init took and the heap allocations per message. Bandwidth is, with
-pattern osu (the default), windows of non-blocking sends, each
acknowledged (as the OSU benchmarks measure MPI); with -pattern stream, one
run of back-to-back sends (as bench/nccl/p2p.c measures NCCL); with -pattern
both, that run in both directions at once, the figure per direction.

With -coll, it measures collectives instead, on every rank: LIST names
some of allreduce, allgather, alltoall, reducescatter, bcast; float32
elements, Sum; each call waited for (the blocking API); the time per call
of the slowest rank, the algorithm bandwidth (bytes / time) and the bus
bandwidth (times 2(N-1)/N for allreduce, (N-1)/N for allgather, alltoall
and reducescatter, 1 for bcast), as bench/nccl/coll.c prints them for C.
SIZES are per call: allreduce's and bcast's buffer, allgather's receive
buffer, alltoall's and reducescatter's send buffer.

Started alone, it runs itself as -np ranks with courier run; started by a
launcher (courier run, mpirun, srun), it is one rank of that job, and rank
0 prints. SIZES are comma-separated byte counts, each with an optional k or
m (KiB, MiB): 4096, 64k, 1m.

What to measure:

  -lat SIZES        latency message sizes (default 1,4096,65536,1048576)
  -bw SIZES         bandwidth message sizes
                    (default 4096,65536,1048576,4194304,67108864)
  -pattern P        bandwidth pattern, osu, stream or both (default osu)
  -window N         sends in flight per bandwidth window of the osu
                    pattern, each window then acknowledged (default 64)
  -coll LIST        measure these collectives (comma-separated) instead of
                    point-to-point (default: none, point-to-point)
  -collsizes SIZES  collective sizes (default 8,128k,2m,32m,128m,512m)
  -reps N           figures per row: each row is measured N times and the
                    median printed (default 3). A latency figure is about
                    64 MiB of round trips (3 to 20000, cut to about 2 s), a
                    bandwidth figure about 1 GiB (3 to 20000 windows), a
                    collective's about 0.2 s (5 to 100000 calls): the run
                    takes N times the sum over the sizes, and 0.25 s of
                    untimed round trips at the first latency size first
  -device           send GPU memory (the rank's GPU) instead of host memory
                    (default false)
  -np N             ranks to run when started alone (default 2)
  -cpuprofile FILE  write each rank's CPU profile of the measurements to
                    FILE.rankN, for go tool pprof (default: none)

Output:

  -json FILE        also write the run as one JSON document to FILE (schema
                    courier-bench/1: a header object, then the p2p and coll
                    rows; docs/benchmarks.md describes it); with -json -,
                    write it to standard output instead of the table
                    (default: none)
  -label TEXT       the run's name in the JSON header and the plot's legend
                    (default "courier BACKEND", plus COURIER_TRANSPORTS when
                    set)
  -plot FILE.svg    draw this run, and the runs of -compare, to FILE.svg:
                    latency and bandwidth against size (or each
                    collective's time per call against size), log-log, one
                    line per run (default: none)
  -compare FILES    earlier runs (JSON files of courier bench -json or of
                    bench/mpi/p2p.c and coll.c -json) to draw beside this
                    one with -plot; comma-separated, and the flag may be
                    repeated (default: none)

While it measures, rank 0 shows on standard error, when that is a
terminal, which figure of which row it is at and how long the run has
taken (one line, rewritten; nothing when standard error is a file or a
pipe).

To plot or tabulate JSON files without running anything, use courier plot.

Exit status: 0 on success (and for -h), 2 for a usage error, 1 otherwise.
`

// selfCommand returns the command line that runs this courier binary
// (tests replace it: their binary needs a marker argument).
var selfCommand = func() ([]string, error) {
	exe, err := os.Executable()
	return []string{exe}, err
}

// benchOptions are courier bench's flags.
type benchOptions struct {
	reps, window, np             int
	lat, bw, pattern, cpuProfile string
	coll, collSizes              string
	device                       bool
	jsonOut, label, plotOut      string
	compare                      listFlag
}

// listFlag is a flag of comma-separated values that may be repeated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// benchFlags returns courier bench's flag set, whose errors go to stderr,
// and the options it fills. Every flag it defines is in benchUsage.
func benchFlags(stderr io.Writer) (*flag.FlagSet, *benchOptions) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // the usage is printed after the error
	cfg := bench.Default()
	o := &benchOptions{}
	fs.IntVar(&o.reps, "reps", cfg.Reps, "figures per row (the median is printed)")
	fs.IntVar(&o.window, "window", cfg.Window, "sends in flight per bandwidth window")
	fs.StringVar(&o.lat, "lat", joinSizes(cfg.LatencySizes), "latency sizes")
	fs.StringVar(&o.bw, "bw", joinSizes(cfg.BandwidthSizes), "bandwidth sizes")
	fs.StringVar(&o.pattern, "pattern", "osu", "bandwidth pattern: osu or stream")
	fs.BoolVar(&o.device, "device", false, "send GPU memory instead of host memory")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write each rank's CPU profile to `FILE`.rankN")
	fs.StringVar(&o.coll, "coll", "", "measure these collectives instead of point-to-point")
	fs.StringVar(&o.collSizes, "collsizes", "8,128k,2m,32m,128m,512m", "collective sizes")
	fs.IntVar(&o.np, "np", 2, "ranks to run, when started alone")
	fs.StringVar(&o.jsonOut, "json", "", "write the run as JSON to `FILE` (- for standard output)")
	fs.StringVar(&o.label, "label", "", "the run's name in the JSON and the plot")
	fs.StringVar(&o.plotOut, "plot", "", "draw the run and the -compare runs to `FILE.svg`")
	fs.Var(&o.compare, "compare", "earlier runs' JSON `FILES` to plot beside this one")
	return fs, o
}

// bench is courier bench.
func (a *app) bench(args []string) int {
	fs, o := benchFlags(a.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(a.stdout, benchUsage)
			return 0
		}
		io.WriteString(a.stderr, benchUsage)
		return 2
	}
	cfg := bench.Default()
	var err error
	if cfg.LatencySizes, err = parseSizes(o.lat); err == nil {
		cfg.BandwidthSizes, err = parseSizes(o.bw)
	}
	if err == nil && !slices.Contains(bench.Patterns, o.pattern) {
		err = fmt.Errorf("unknown pattern %q (have %s)", o.pattern, strings.Join(bench.Patterns, ", "))
	}
	collCfg := bench.CollConfig{Reps: o.reps, Device: o.device}
	if err == nil && o.coll != "" {
		for _, k := range strings.Split(o.coll, ",") {
			if k = strings.TrimSpace(k); !slices.Contains(bench.Collectives, k) {
				err = fmt.Errorf("unknown collective %q (have %s)", k, strings.Join(bench.Collectives, ", "))
				break
			}
			collCfg.Kinds = append(collCfg.Kinds, k)
		}
		if err == nil {
			collCfg.Sizes, err = parseSizes(o.collSizes)
		}
	}
	if err == nil && len(o.compare) > 0 && o.plotOut == "" {
		err = errors.New("-compare draws runs beside this one: it needs -plot")
	}
	if err != nil || o.reps < 1 || o.window < 1 || o.np < 1 || fs.NArg() > 0 {
		if err != nil {
			fmt.Fprintln(a.stderr, "courier bench:", err)
		}
		io.WriteString(a.stderr, benchUsage)
		return 2
	}
	cfg.Reps, cfg.Window, cfg.Pattern, cfg.Device = o.reps, o.window, o.pattern, o.device

	// FromEnv, not Detect: rank 0's inherited socket is for mp.Init.
	job, err := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	// The runs to compare with, read before anything is measured (by the
	// process that starts the ranks, and by rank 0, which draws).
	var compare []*bench.Document
	if job.Size == 1 || job.Rank == 0 {
		for _, path := range o.compare {
			d, err := bench.ReadFile(path)
			if err != nil {
				fmt.Fprintln(a.stderr, "courier bench: -compare:", err)
				return 1
			}
			compare = append(compare, d)
		}
	}
	if job.Size == 1 {
		// Not in a job: become one of -np ranks.
		self, err := selfCommand()
		if err != nil {
			fmt.Fprintln(a.stderr, "courier bench:", err)
			return 1
		}
		sigs, stop := a.signals()
		defer stop()
		res := launch.Run(context.Background(), launch.Config{
			NP: o.np, Program: self[0], Args: append(append(self[1:], "bench"), args...),
			Stdout: a.stdout, Stderr: a.stderr, NoPrefix: true, Signals: sigs,
		})
		return res.ExitCode
	}
	date := time.Now()
	comm, err := mp.Init(context.Background())
	initTime := time.Since(date)
	if err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	defer comm.Close()
	table := a.stdout
	if o.jsonOut == "-" {
		table = io.Discard
	}
	doc := benchHeader(comm, o, args, date, initTime)
	if comm.Rank() == 0 && o.coll == "" {
		bench.Header(table, comm.Backend(), cfg, initTime)
	}
	if comm.Rank() == 0 && o.coll != "" {
		bench.CollHeader(table, comm.Backend(), comm.Size(), collCfg, initTime)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.rank%d", o.cpuProfile, comm.Rank()))
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
	var progress *progressLine
	if comm.Rank() == 0 {
		progress = newProgress(a.stderr)
	}
	cfg.Progress, collCfg.Progress = progress.hook(), progress.hook()
	if o.coll != "" {
		_, err = bench.RunColl(comm, collCfg, func(r bench.CollRow) {
			progress.clear()
			bench.PrintCollRow(table, r)
			doc.Coll = append(doc.Coll, r.Record())
		})
	} else {
		_, err = bench.Run(comm, cfg, func(r bench.Row) {
			progress.clear()
			bench.PrintRow(table, r)
			doc.P2P = append(doc.P2P, r.Record())
		})
	}
	progress.clear()
	if err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	if comm.Rank() == 0 {
		if err := a.benchOutputs(o, doc, compare); err != nil {
			fmt.Fprintln(a.stderr, "courier bench:", err)
			return 1
		}
	}
	if err := comm.Close(); err != nil {
		fmt.Fprintln(a.stderr, "courier bench:", err)
		return 1
	}
	return 0
}

// benchHeader is the JSON header of the run about to start.
func benchHeader(comm *mp.Comm, o *benchOptions, args []string, date time.Time, initTime time.Duration) *bench.Document {
	transport := strings.TrimSpace(os.Getenv("COURIER_TRANSPORTS"))
	label := o.label
	if label == "" {
		label = strings.TrimSpace("courier " + comm.Backend() + " " + transport)
	}
	host, _ := os.Hostname()
	h := bench.RunHeader{
		Program:    "courier bench",
		Label:      label,
		Backend:    comm.Backend(),
		Transport:  transport,
		Library:    "courier " + version,
		Ranks:      comm.Size(),
		Date:       date.UTC().Format(time.RFC3339),
		Host:       host,
		GoVersion:  runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Command:    append([]string{"courier", "bench"}, args...),
		Env:        settings(os.Environ()),
		Memory:     "host",
		Reps:       o.reps,
		InitMicros: float64(initTime.Nanoseconds()) / 1e3,
	}
	if o.device {
		h.Memory = "device"
	}
	if o.coll == "" {
		h.Pattern, h.Window = o.pattern, o.window
	}
	return &bench.Document{Schema: bench.Schema, Header: h}
}

// launchVariables are the COURIER_ variables a launcher sets for one job:
// they say nothing about what was measured, and the key is a secret.
var launchVariables = []string{"COURIER_RANK", "COURIER_SIZE", "COURIER_LOCAL_RANK", "COURIER_LOCAL_SIZE",
	"COURIER_ADDR", "COURIER_JOB_KEY", "COURIER_RENDEZVOUS_FD"}

// settings returns the COURIER_ variables of env that are settings, not
// a launcher's; nil if none.
func settings(env []string) map[string]string {
	var m map[string]string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "COURIER_") || slices.Contains(launchVariables, k) {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m
}

// benchOutputs writes the JSON document and the plot that o asks for.
func (a *app) benchOutputs(o *benchOptions, doc *bench.Document, compare []*bench.Document) error {
	switch o.jsonOut {
	case "":
	case "-":
		if err := bench.WriteJSON(a.stdout, doc); err != nil {
			return err
		}
	default:
		if err := writeFile(o.jsonOut, func(w io.Writer) error { return bench.WriteJSON(w, doc) }); err != nil {
			return fmt.Errorf("-json: %w", err)
		}
	}
	if o.plotOut != "" {
		series := bench.Combine(append(compare, doc), false)
		if err := writeFile(o.plotOut, func(w io.Writer) error { return chart.SVG(w, "", series) }); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	return nil
}

// writeFile creates path and writes it with write; a failed write leaves
// no file behind.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
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
