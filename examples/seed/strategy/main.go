// Command strategy measures the NCCL guide's choice between its two modes
// (section 4.5) on the machine it runs on, instead of taking the guide's
// rule of thumb (sync under 1 MB, async over 100 MB, and between them
// whatever the compute's density says). For each message size from -min
// to -max (×4 a step), rank 0 sends a message to rank 1 and both then
// compute, -density floating-point operations per byte of the message
// (a square matrix multiply of that many operations), in the two ways:
//
//   - blocking: Send (Recv on rank 1), then the compute;
//   - overlapped: Isend (Irecv), the compute, then Wait.
//
// It prints a row per size: the time of one message and its compute each
// way (the slower rank's, the median of -reps samples after one that is
// not counted), their ratio, what the guide would choose, and what won.
// The last line names the size from which overlapping paid at every larger
// size measured (blocking/overlapped at least 1 + -margin), beside the
// guide's rule.
//
// Run it with:
//
//	go run ./cmd/courier run -np 2 ./examples/seed/strategy
//	go run ./cmd/courier run -np 2 ./examples/seed/strategy -density 8 -max 64MiB
//	go run ./cmd/courier run -np 2 ./examples/seed/strategy -device
//
// Host memory by default, with the compute in Go on GOMAXPROCS
// goroutines, from 4 KiB to 256 MiB (not 1 GiB: that row alone takes
// some 20 s on two cores, and a 1 GiB buffer in each rank; -max 1GiB
// goes on). With
// -device the message is GPU memory and the compute a PTX kernel on a
// CUDA stream (examples/seed/internal/work), from 4 KiB to 1 GiB; without
// a GPU, -device says so and exits 0.
//
// Each size's last message is checked (rank 1's checksum against rank
// 0's), and so is each size's product (rows recomputed on the CPU, to the
// bit); the program exits 1 if a check fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/examples/seed/internal/work"
	"github.com/courier-mp/courier/mp"
)

func main() {
	cfg, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "strategy:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "strategy:", err)
		os.Exit(1)
	}
}

// The default largest sizes, on the host and with -device.
const (
	hostMax   = 256 << 20
	deviceMax = 1 << 30
)

// config is the command line.
type config struct {
	min, max work.Bytes
	density  float64 // FLOPs a byte sent
	margin   float64
	reps     int
	device   bool
}

// parse reads the command line and checks it; the flag package's
// messages and -h's usage go to out.
func parse(args []string, out io.Writer) (config, error) {
	c := config{min: 4 << 10}
	fs := flag.NewFlagSet("strategy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Var(&c.min, "min", "the smallest message (4KiB, 1MiB, or bytes; a multiple of 4)")
	fs.Var(&c.max, "max", "the largest message (default 256MiB, 1GiB with -device)")
	fs.Float64Var(&c.density, "density", 1, "the compute's density: floating-point operations per byte of the message")
	fs.Float64Var(&c.margin, "margin", 0.05, "overlap pays where blocking/overlapped is at least 1 + margin")
	fs.IntVar(&c.reps, "reps", 5, "samples a size and mode, after one that is not counted; the median is printed")
	fs.BoolVar(&c.device, "device", false, "GPU memory, and the compute a PTX kernel on a CUDA stream")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.max == 0 {
		c.max = hostMax
		if c.device {
			c.max = deviceMax
		}
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.min < 4 || c.min%4 != 0:
		return c, fmt.Errorf("-min %v: must be a multiple of 4 bytes (float32s), at least 4", c.min)
	case c.max < c.min:
		return c, fmt.Errorf("-max %v is below -min %v", c.max, c.min)
	case !(c.density > 0) || math.IsInf(c.density, 0):
		return c, fmt.Errorf("-density %v: must be a positive number", c.density)
	case !(c.margin >= 0) || math.IsInf(c.margin, 0):
		return c, fmt.Errorf("-margin %v: must be 0 or more", c.margin)
	case c.reps < 1:
		return c, fmt.Errorf("-reps %d: must be at least 1", c.reps)
	}
	if n := order(c.density, int64(c.max)); n > maxOrder {
		return c, fmt.Errorf("-density %v at -max %v makes a %d×%d matmul, larger than %d×%d", c.density, c.max, n, n, maxOrder, maxOrder)
	}
	return c, nil
}

// maxOrder is the largest matrix the compute uses: the GPU kernel's
// bound, and far more than a CPU multiplies in reasonable time.
const maxOrder = 65535

// sizes are the message sizes measured: min, ×4, … up to max.
func sizes(min, max work.Bytes) []int64 {
	var s []int64
	for b := int64(min); b <= int64(max); b *= 4 {
		s = append(s, b)
		if b > math.MaxInt64/4 {
			break
		}
	}
	return s
}

// order is the order n of the square matmul of about density·bytes
// floating-point operations (2n³), at least 1.
func order(density float64, bytes int64) int {
	return max(1, int(math.Round(math.Cbrt(density*float64(bytes)/2))))
}

// iterations is how many messages one sample of a size times: enough for
// some 16 MiB, so that the clock's resolution and the barrier's cost do
// not swamp small messages, and at most 1024.
func iterations(bytes int64) int {
	return int(min(1024, max(1, (16<<20)/bytes)))
}

// The message tags.
const (
	tagMsg = 1 + iota
	tagSum
)

// rowsChecked is how many rows of each product are recomputed on the CPU.
const rowsChecked = 4

func run(cfg config, stdout io.Writer) error {
	c, err := mp.Init(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	if c.Size() != 2 {
		return fmt.Errorf("run with 2 ranks (courier run -np 2), not %d", c.Size())
	}
	w := io.Discard // rank 1 prints
	if c.Rank() == 1 {
		w = stdout
	}
	var m mode
	if cfg.device {
		dev, err := c.Device()
		if errors.Is(err, mp.ErrNotSupported) {
			fmt.Fprintf(w, "strategy -device: skipped, no GPU here (%v)\n", err)
			return nil
		}
		if err != nil {
			return err
		}
		g, err := newGPU(c, dev)
		if err != nil {
			return err
		}
		defer g.free()
		m = g
	} else {
		m = &cpu{c: c}
	}

	fmt.Fprintf(w, "strategy: rank 0 sends to rank 1, %s; the compute: %g FLOP per byte sent, %s\n", m.memory(), cfg.density, m.describe())
	fmt.Fprintf(w, "blocking: Send/Recv, then the compute; overlapped: Isend/Irecv, the compute, Wait; the time of one message and its compute, median of %d\n", cfg.reps)
	fmt.Fprintf(w, "%10s %13s %11s %11s %20s %8s %9s  %s\n", "size", "matmul", "blocking", "overlapped", "blocking/overlapped", "guide", "measured", "checksum (rank 0's = rank 1's)")
	var rows []row
	for _, bytes := range sizes(cfg.min, cfg.max) {
		r, err := measureSize(c, m, cfg, bytes)
		if err != nil {
			return fmt.Errorf("%v: %w", work.Bytes(bytes), err)
		}
		rows = append(rows, r)
		n := fmt.Sprintf("%d×%d", r.n, r.n)
		fmt.Fprintf(w, "%10v %13s %11s %11s %20.2f %8s %9s  %08x\n", work.Bytes(bytes), n, duration(r.blocking), duration(r.overlapped),
			r.ratio(), guide(bytes), r.verdict(cfg.margin), r.sum)
	}
	fmt.Fprintln(w, crossover(rows, cfg.margin)+"; the guide's rule of thumb: sync under 1 MB, depends on compute density from 1 to 100 MB, async over 100 MB")
	return nil
}

// row is one size's result.
type row struct {
	bytes                int64
	n                    int
	blocking, overlapped time.Duration
	sum                  uint32 // the last message's checksum, the same on both ranks
}

func (r row) ratio() float64 { return float64(r.blocking) / float64(r.overlapped) }

// verdict says which way won, by at least the margin.
func (r row) verdict(margin float64) string {
	switch {
	case r.ratio() >= 1+margin:
		return "overlap"
	case r.ratio() <= 1/(1+margin):
		return "blocking"
	}
	return "even"
}

// guide is the guide's choice for a message of bytes (its MB taken as
// 10⁶ bytes).
func guide(bytes int64) string {
	switch {
	case bytes < 1e6:
		return "sync"
	case bytes > 100e6:
		return "async"
	}
	return "depends"
}

// crossover names the smallest size from which overlapping paid at every
// size measured.
func crossover(rows []row, margin float64) string {
	if len(rows) == 0 {
		return "no size measured"
	}
	first := len(rows)
	for first > 0 && rows[first-1].verdict(margin) == "overlap" {
		first--
	}
	last := work.Bytes(rows[len(rows)-1].bytes)
	switch first {
	case len(rows):
		var won []string
		for _, r := range rows {
			if r.verdict(margin) == "overlap" {
				won = append(won, work.Bytes(r.bytes).String())
			}
		}
		line := fmt.Sprintf("overlap pays at no size here: blocking/overlapped is under %.2f at the largest, %v", 1+margin, last)
		if len(won) > 0 {
			line += fmt.Sprintf(" (overlap won at %s, but not at every size above)", strings.Join(won, ", "))
		}
		return line
	case 0:
		return fmt.Sprintf("overlap pays from %v up (the smallest size measured): blocking/overlapped at least %.2f at every size to %v", work.Bytes(rows[0].bytes), 1+margin, last)
	case len(rows) - 1:
		return fmt.Sprintf("overlap pays from %v up (only the largest size measured): blocking/overlapped at least %.2f there", last, 1+margin)
	}
	return fmt.Sprintf("overlap pays from %v up: blocking/overlapped at least %.2f at every size from there to %v", work.Bytes(rows[first].bytes), 1+margin, last)
}

// duration prints d with three or four significant digits.
func duration(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case us < 1000:
		return fmt.Sprintf("%.1f µs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2f ms", us/1e3)
	}
	return fmt.Sprintf("%.3f s", us/1e6)
}

// mode is where the message and the compute live: the CPU's host memory
// and goroutines, or a GPU's memory and kernel.
type mode interface {
	memory() string   // where the message is, for the heading
	describe() string // what computes, for the heading
	// setup makes the buffers of a size: a message of bytes, matrices of
	// order n.
	setup(bytes int64, n int) error
	// clear zeroes rank 1's message, before a sample.
	clear() error
	// send and recv move the message, blocking; isend and irecv start it.
	send() error
	recv() error
	isend() *mp.Request
	irecv() *mp.Request
	// compute runs the multiply and returns when it is done.
	compute() error
	// check returns this rank's message checksum (the one sent, or the
	// one received) and the error of its product's check.
	check() (uint32, error)
}

// measureSize times one size both ways and checks its last message.
func measureSize(c *mp.Comm, m mode, cfg config, bytes int64) (row, error) {
	r := row{bytes: bytes, n: order(cfg.density, bytes)}
	if err := m.setup(bytes, r.n); err != nil {
		return r, err
	}
	k := iterations(bytes)
	me := c.Rank()
	blocking := func() error {
		for range k {
			var err error
			if me == 0 {
				err = m.send()
			} else {
				err = m.recv()
			}
			if err != nil {
				return err
			}
			if err := m.compute(); err != nil {
				return err
			}
		}
		return nil
	}
	overlapped := func() error {
		for range k {
			q := m.irecv
			if me == 0 {
				q = m.isend
			}
			req := q()
			// Test issues the message now where a backend waits for the
			// next Wait or Test to do it (nccl); the others already have.
			if _, _, err := req.Test(); err != nil {
				return err
			}
			err := m.compute()
			_, werr := req.Wait()
			if err := errors.Join(err, werr); err != nil {
				return err
			}
		}
		return nil
	}
	var samples [2][]float64
	for s := range cfg.reps + 1 {
		var secs [2]float64
		for i, f := range []func() error{blocking, overlapped} {
			if me == 1 {
				if err := m.clear(); err != nil {
					return r, err
				}
			}
			if err := mp.Barrier(c); err != nil {
				return r, err
			}
			start := time.Now()
			if err := f(); err != nil {
				return r, err
			}
			secs[i] = time.Since(start).Seconds() / float64(k)
		}
		if err := mp.Allreduce(c, secs[:], secs[:], mp.Max); err != nil {
			return r, err
		}
		if s > 0 {
			samples[0] = append(samples[0], secs[0])
			samples[1] = append(samples[1], secs[1])
		}
	}
	r.blocking, r.overlapped = median(samples[0]), median(samples[1])

	sum, err := m.check()
	bad := []int32{0}
	if err != nil {
		bad[0] = 1
	}
	if rerr := mp.Allreduce(c, bad, bad, mp.Max); rerr != nil {
		return r, errors.Join(err, rerr)
	}
	if err != nil {
		return r, fmt.Errorf("the %d×%d matmul: %w", r.n, r.n, err)
	}
	if bad[0] != 0 {
		return r, fmt.Errorf("the %d×%d matmul: the check failed on rank 0", r.n, r.n)
	}
	sums := []uint32{sum}
	if me == 0 {
		return r, mp.Send(c, sums, 1, tagSum)
	}
	if _, err := mp.Recv(c, sums, 0, tagSum); err != nil {
		return r, err
	}
	if sums[0] != sum {
		return r, fmt.Errorf("rank 0 sent checksum %08x, rank 1 received %08x", sums[0], sum)
	}
	r.sum = sum
	return r, nil
}

// median is the middle of secs (the mean of the two middle ones for an
// even count), as a duration.
func median(secs []float64) time.Duration {
	s := slices.Sorted(slices.Values(secs))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return time.Duration(m * float64(time.Second))
}

// cpu is host memory and a Go matmul.
type cpu struct {
	c          *mp.Comm
	msg        []float32
	a, b, prod []float32
	n          int
}

func (h *cpu) memory() string { return "host memory" }

func (h *cpu) describe() string {
	if w := runtime.GOMAXPROCS(0); w > 1 {
		return fmt.Sprintf("a Go matmul on %d goroutines a rank", w)
	}
	return "a Go matmul on one goroutine a rank"
}

func (h *cpu) setup(bytes int64, n int) error {
	h.msg = make([]float32, bytes/4)
	if h.c.Rank() == 0 {
		work.Fill(h.msg, int(bytes%7))
	}
	h.n = n
	h.a, h.b, h.prod = make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	work.Fill(h.a, 1)
	work.Fill(h.b, 2)
	return nil
}

func (h *cpu) clear() error { clear(h.msg); return nil }
func (h *cpu) send() error  { return mp.Send(h.c, h.msg, 1, tagMsg) }
func (h *cpu) recv() error {
	_, err := mp.Recv(h.c, h.msg, 0, tagMsg)
	return err
}
func (h *cpu) isend() *mp.Request { return mp.Isend(h.c, h.msg, 1, tagMsg) }
func (h *cpu) irecv() *mp.Request { return mp.Irecv(h.c, h.msg, 0, tagMsg) }
func (h *cpu) compute() error {
	return work.Multiply(h.prod, h.a, h.b, h.n, runtime.GOMAXPROCS(0))
}

func (h *cpu) check() (uint32, error) {
	_, err := work.Check(h.prod, h.a, h.b, h.n, rowsChecked)
	return work.Checksum(h.msg), err
}

// gpu is device memory and the PTX matmul on a compute stream.
type gpu struct {
	c          *mp.Comm
	dev        cuda.Device
	name       string
	k          *work.Kernel
	s          *cuda.Stream
	msg        cuda.Slice[float32]
	a, b, prod cuda.Slice[float32]
	hostA      []float32
	hostB      []float32
	n          int
	sent       uint32 // rank 0: the message's checksum
}

// newGPU loads the kernel and makes the compute stream on dev.
func newGPU(c *mp.Comm, dev cuda.Device) (*gpu, error) {
	g := &gpu{c: c, dev: dev}
	var err error
	if g.name, err = dev.Name(); err != nil {
		return nil, err
	}
	if g.k, err = work.LoadKernel(dev); err != nil {
		return nil, err
	}
	if g.s, err = cuda.NewStream(dev); err != nil {
		g.k.Unload()
		return nil, err
	}
	return g, nil
}

func (g *gpu) memory() string { return fmt.Sprintf("device memory (%v, %s)", g.dev, g.name) }

func (g *gpu) describe() string { return "a PTX sgemm kernel on a compute stream" }

// release frees a size's buffers.
func (g *gpu) release() {
	for _, m := range []cuda.Slice[float32]{g.msg, g.a, g.b, g.prod} {
		m.Free()
	}
	g.msg, g.a, g.b, g.prod = cuda.Slice[float32]{}, cuda.Slice[float32]{}, cuda.Slice[float32]{}, cuda.Slice[float32]{}
}

func (g *gpu) free() {
	g.s.Synchronize()
	g.release()
	g.s.Destroy()
	g.k.Unload()
}

func (g *gpu) setup(bytes int64, n int) error {
	if err := g.s.Synchronize(); err != nil {
		return err
	}
	g.release()
	nn := int64(n) * int64(n)
	for _, m := range []struct {
		s *cuda.Slice[float32]
		n int64
	}{{&g.msg, bytes / 4}, {&g.a, nn}, {&g.b, nn}, {&g.prod, nn}} {
		var err error
		if *m.s, err = cuda.Alloc[float32](g.dev, m.n); err != nil {
			return err
		}
	}
	g.n = n
	g.hostA, g.hostB = make([]float32, nn), make([]float32, nn)
	work.Fill(g.hostA, 1)
	work.Fill(g.hostB, 2)
	if err := cuda.CopyToDevice(g.a, g.hostA); err != nil {
		return err
	}
	if err := cuda.CopyToDevice(g.b, g.hostB); err != nil {
		return err
	}
	if g.c.Rank() == 0 {
		x := make([]float32, bytes/4)
		work.Fill(x, int(bytes%7))
		g.sent = work.Checksum(x)
		return cuda.CopyToDevice(g.msg, x)
	}
	return nil
}

func (g *gpu) clear() error { return cuda.Memset(g.msg, 0) }
func (g *gpu) send() error  { return mp.Send(g.c, g.msg, 1, tagMsg) }
func (g *gpu) recv() error {
	_, err := mp.Recv(g.c, g.msg, 0, tagMsg)
	return err
}
func (g *gpu) isend() *mp.Request { return mp.Isend(g.c, g.msg, 1, tagMsg) }
func (g *gpu) irecv() *mp.Request { return mp.Irecv(g.c, g.msg, 0, tagMsg) }

// compute queues the kernel and waits for it: in the overlapped form the
// message, posted before, moves meanwhile.
func (g *gpu) compute() error {
	if err := g.k.Multiply(g.prod, g.a, g.b, g.n, g.s); err != nil {
		return err
	}
	return g.s.Synchronize()
}

func (g *gpu) check() (uint32, error) {
	prod := make([]float32, g.prod.Len())
	err := cuda.CopyToHost(prod, g.prod)
	if err == nil {
		_, err = work.Check(prod, g.hostA, g.hostB, g.n, rowsChecked)
	}
	if g.c.Rank() == 0 {
		return g.sent, err
	}
	msg := make([]float32, g.msg.Len())
	if cerr := cuda.CopyToHost(msg, g.msg); cerr != nil {
		return 0, errors.Join(err, cerr)
	}
	return work.Checksum(msg), err
}
