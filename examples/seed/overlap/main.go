// Command overlap is the NCCL guide's second example (section 4.4)
// written with courier: a matrix multiply computes while a large message
// travels, and the program prints how long the compute takes alone, the
// message alone, and both at once, and the speed-up of overlapping them,
// (compute + transfer) / overlapped. Rank 0 sends, rank 1 receives, both
// compute; each time is the slower rank's, the best of -reps rounds
// after one that is not counted.
//
// The CPU part runs everywhere: the multiply is Go code on as many
// goroutines as GOMAXPROCS, the message a slice of host memory sent with
// mp.Isend and received with mp.Irecv, and the CPU computes between the
// post and the Wait.
//
// The GPU part (-device) is the guide's: the multiply is a kernel written
// in PTX (examples/seed/internal/work), queued on a compute stream, and
// the message is device memory, sent with mp.Isend/mp.Irecv (or, with
// -on-stream, mp.IsendOnStream/mp.IrecvOnStream on a communication stream
// of its own) while the kernels run. The guide's pitfall is the compute
// stream touching the message's buffer while it is still in flight; here
// the last kernel of each rank does touch it (rank 0's overwrites the
// buffer it sends, rank 1's multiplies by the buffer it receives), and
// req.WaitOn(computeStream), queued before it, makes the stream wait on
// the GPU for the transfer, the CPU not waiting. Rank 1 then checks the
// product its kernel made from the message, and the message's checksum
// against the one rank 0 had before its kernel overwrote the buffer.
//
// Run it with:
//
//	go run ./cmd/courier run -np 2 ./examples/seed/overlap
//	go run ./cmd/courier run -np 2 ./examples/seed/overlap -device
//
// (-n, -size, -gpu-n and -gpu-size choose the work; -h lists the flags.)
// Without a GPU, -device says that the GPU part was skipped and exits 0.
// On the host and tcp backends device memory is staged through the host;
// on nccl, two ranks on one GPU (COURIER_DEVICE=0) meet through CUDA IPC.
//
// Every multiply is checked: the inputs are small integers, so the
// products are exact, and rows of each are recomputed on the CPU and
// compared to the bit. The program exits 1 if a check fails.
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
	"strconv"
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
		fmt.Fprintln(os.Stderr, "overlap:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "overlap:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	n, gpuN       int        // the matrices' order, CPU and GPU
	size, gpuSize work.Bytes // the message's size, CPU and GPU
	iters, reps   int
	device        bool
	onStream      bool
}

// parse reads the command line and checks it; the flag package's
// messages and -h's usage go to out.
func parse(args []string, out io.Writer) (config, error) {
	c := config{size: 32 << 20, gpuSize: 1 << 30}
	fs := flag.NewFlagSet("overlap", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.n, "n", 256, "CPU part: the order of the matrices (n×n float32)")
	fs.Var(&c.size, "size", "CPU part: the message's size (4KiB, 32MiB, 1GiB, or bytes; a multiple of 4)")
	fs.IntVar(&c.gpuN, "gpu-n", 1024, "GPU part: the order of the matrices")
	fs.Var(&c.gpuSize, "gpu-size", "GPU part: the message's size (at least 4·gpu-n² bytes: rank 1 multiplies by its start)")
	fs.IntVar(&c.iters, "iters", 2, "multiplies a phase (the GPU part adds one, the kernel behind WaitOn)")
	fs.IntVar(&c.reps, "reps", 3, "rounds timed, after one that is not; the best of each phase is printed")
	fs.BoolVar(&c.device, "device", false, "also run the GPU part: a PTX kernel on a compute stream beside a message of device memory")
	fs.BoolVar(&c.onStream, "on-stream", false, "GPU part: post the message with IsendOnStream/IrecvOnStream on a communication stream")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.n < 1:
		return c, fmt.Errorf("-n %d: must be at least 1", c.n)
	case c.gpuN < 1 || c.gpuN > 65535:
		return c, fmt.Errorf("-gpu-n %d: must be 1 to 65535", c.gpuN)
	case c.iters < 1 || c.reps < 1:
		return c, fmt.Errorf("-iters %d, -reps %d: must be at least 1", c.iters, c.reps)
	case c.size < 4 || c.size%4 != 0:
		return c, fmt.Errorf("-size %v: must be a multiple of 4 bytes (float32s), at least 4", c.size)
	case c.gpuSize%4 != 0 || int64(c.gpuSize)/4 < int64(c.gpuN)*int64(c.gpuN):
		return c, fmt.Errorf("-gpu-size %v: must be a multiple of 4 bytes holding at least gpu-n² = %d float32s", c.gpuSize, c.gpuN*c.gpuN)
	}
	return c, nil
}

// The message tags.
const (
	tagCPU = 1 + iota
	tagGPU
	tagCPUSum
	tagGPUSum
)

// rowsChecked is how many rows of each product are recomputed on the CPU.
const rowsChecked = 8

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
	if err := cpuPart(c, cfg, w); err != nil {
		return err
	}
	if !cfg.device {
		return nil
	}
	return gpuPart(c, cfg, w)
}

// phases is one part of the program: what it times, and what it does
// untimed before each timed phase.
type phases struct {
	prepare    func() error
	compute    func() error // the multiplies alone
	transfer   func() error // the message alone
	overlapped func() error // both at once
}

// times are a part's results, in the order of phases' fields.
type times [3]time.Duration

// measure runs rounds of p's three phases, each started by a barrier: one
// round to warm up, then reps timed ones. It returns each phase's best
// time over the timed rounds, a round's time being the slower rank's.
func measure(c *mp.Comm, reps int, p phases) (times, error) {
	best := times{math.MaxInt64, math.MaxInt64, math.MaxInt64}
	for round := range reps + 1 {
		var secs [3]float64
		for i, phase := range []func() error{p.compute, p.transfer, p.overlapped} {
			if err := p.prepare(); err != nil {
				return best, err
			}
			if err := mp.Barrier(c); err != nil {
				return best, err
			}
			start := time.Now()
			if err := phase(); err != nil {
				return best, err
			}
			secs[i] = time.Since(start).Seconds()
		}
		if err := mp.Allreduce(c, secs[:], secs[:], mp.Max); err != nil {
			return best, err
		}
		for i, s := range secs {
			if round > 0 {
				best[i] = min(best[i], time.Duration(s*float64(time.Second)))
			}
		}
	}
	return best, nil
}

// report prints a part's times and the speed-up.
func report(w io.Writer, part string, t times) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(w, "%s compute only:     %10.3f ms\n", part, ms(t[0]))
	fmt.Fprintf(w, "%s transfer only:    %10.3f ms\n", part, ms(t[1]))
	fmt.Fprintf(w, "%s overlapped:       %10.3f ms\n", part, ms(t[2]))
	fmt.Fprintf(w, "%s speed-up (compute+transfer)/overlapped: %.2f\n", part, float64(t[0]+t[1])/float64(t[2]))
}

// agree reports whether every rank's err is nil; the error names this
// rank's failure, or says that another rank failed.
func agree(c *mp.Comm, what string, err error) error {
	bad := []int32{0}
	if err != nil {
		bad[0] = 1
	}
	if rerr := mp.Allreduce(c, bad, bad, mp.Max); rerr != nil {
		return errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if bad[0] != 0 {
		return fmt.Errorf("%s: the check failed on the other rank", what)
	}
	return nil
}

// compareSums sends rank 0's checksum to rank 1, which prints both and
// fails if they differ.
func compareSums(c *mp.Comm, w io.Writer, part string, got uint32, tag int) error {
	if c.Rank() == 0 {
		return mp.Send(c, []uint32{got}, 1, tag)
	}
	sent := []uint32{0}
	if _, err := mp.Recv(c, sent, 0, tag); err != nil {
		return err
	}
	verdict := "match"
	if got != sent[0] {
		verdict = "DIFFER"
	}
	fmt.Fprintf(w, "%s message: rank 0 sent checksum %08x, rank 1 received %08x: %s\n", part, sent[0], got, verdict)
	if got != sent[0] {
		return fmt.Errorf("%s: the message's checksums differ", part)
	}
	return nil
}

// cpuPart overlaps a Go matrix multiply with a message of host memory.
func cpuPart(c *mp.Comm, cfg config, w io.Writer) error {
	me, n := c.Rank(), cfg.n
	a, b, prod := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	work.Fill(a, 1)
	work.Fill(b, 2)
	msg := make([]float32, cfg.size/4)
	if me == 0 {
		work.Fill(msg, 3)
	}
	workers := runtime.GOMAXPROCS(0)
	multiply := func() error {
		for range cfg.iters {
			if err := work.Multiply(prod, a, b, n, workers); err != nil {
				return err
			}
		}
		return nil
	}
	post := func() *mp.Request {
		if me == 0 {
			return mp.Isend(c, msg, 1, tagCPU)
		}
		return mp.Irecv(c, msg, 0, tagCPU)
	}
	goroutines := fmt.Sprintf("%d goroutines", workers)
	if workers == 1 {
		goroutines = "one goroutine"
	}
	fmt.Fprintf(w, "cpu: matmul %d×%d ×%d a phase on %s a rank, beside a %v message of host memory (rank 0 → rank 1, Isend/Irecv), best of %d\n",
		n, n, cfg.iters, goroutines, cfg.size, cfg.reps)
	t, err := measure(c, cfg.reps, phases{
		prepare: func() error {
			if me == 1 {
				clear(msg) // so that what is checked is what arrived
			}
			return nil
		},
		compute: multiply,
		transfer: func() error {
			_, err := post().Wait()
			return err
		},
		overlapped: func() error {
			q := post()
			// Test issues the message now where a backend waits for the
			// next Wait or Test to do it (nccl); the others already have.
			if _, _, err := q.Test(); err != nil {
				return err
			}
			err := multiply() // the CPU computes; msg is the library's until Wait
			_, werr := q.Wait()
			return errors.Join(err, werr)
		},
	})
	if err != nil {
		return err
	}
	report(w, "cpu", t)
	rows, err := work.Check(prod, a, b, n, rowsChecked)
	if err := agree(c, "cpu matmul", err); err != nil {
		return err
	}
	fmt.Fprintf(w, "cpu matmul: %d rows of %d checked on each rank: exact\n", rows, n)
	return compareSums(c, w, "cpu", work.Checksum(msg), tagCPUSum)
}

// gpuPart overlaps the PTX kernel on a compute stream with a message of
// device memory, and shows WaitOn ordering the compute stream after the
// message.
func gpuPart(c *mp.Comm, cfg config, w io.Writer) error {
	dev, err := c.Device()
	if errors.Is(err, mp.ErrNotSupported) {
		fmt.Fprintf(w, "gpu: skipped, no GPU here (%v)\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	name, err := dev.Name()
	if err != nil {
		return err
	}
	g, err := newGPUWork(c, dev, cfg)
	if err != nil {
		return err
	}
	defer g.free()

	how := "Isend/Irecv"
	if cfg.onStream {
		how = "IsendOnStream/IrecvOnStream on a communication stream"
	}
	n := cfg.gpuN
	fmt.Fprintf(w, "gpu: %v (%s) a rank, sgemm %d×%d ×%d a phase and one behind WaitOn (a PTX kernel on a compute stream), beside a %v message of device memory (%s), best of %d\n",
		dev, name, n, n, cfg.iters, cfg.gpuSize, how, cfg.reps)
	t, err := measure(c, cfg.reps, phases{
		prepare:    g.prepare,
		compute:    g.computeOnly,
		transfer:   g.transferOnly,
		overlapped: g.overlapped,
	})
	if err != nil {
		return err
	}
	report(w, "gpu", t)
	return g.check(w)
}

// gpuWork is the GPU part's memory, streams and kernel on one rank. The
// message is msg; its first n×n floats are the matrix that the kernel
// queued behind WaitOn touches: rank 0's overwrites it with a×b, rank 1's
// multiplies a by it into after.
type gpuWork struct {
	c                *mp.Comm
	cfg              config
	me               int
	k                *work.Kernel
	compute, comm    *cuda.Stream
	a, b, prod, msg  cuda.Slice[float32]
	after            cuda.Slice[float32] // rank 1: a × the message's first n×n
	front            cuda.Slice[float32] // msg's first n×n floats
	hostA, hostB, hx []float32           // hx: rank 0's message
}

// newGPUWork allocates and fills the GPU part's memory on dev, loads the
// kernel and makes the streams.
func newGPUWork(c *mp.Comm, dev cuda.Device, cfg config) (g *gpuWork, err error) {
	g = &gpuWork{c: c, cfg: cfg, me: c.Rank()}
	defer func() {
		if err != nil {
			g.free()
		}
	}()
	if g.k, err = work.LoadKernel(dev); err != nil {
		return g, err
	}
	if g.compute, err = cuda.NewStream(dev); err != nil {
		return g, err
	}
	if cfg.onStream {
		if g.comm, err = cuda.NewStream(dev); err != nil {
			return g, err
		}
	}
	nn := int64(cfg.gpuN) * int64(cfg.gpuN)
	for _, m := range []struct {
		s *cuda.Slice[float32]
		n int64
	}{{&g.a, nn}, {&g.b, nn}, {&g.prod, nn}, {&g.after, nn}, {&g.msg, int64(cfg.gpuSize) / 4}} {
		if *m.s, err = cuda.Alloc[float32](dev, m.n); err != nil {
			return g, err
		}
	}
	if g.front, err = g.msg.Sub(0, nn); err != nil {
		return g, err
	}
	g.hostA, g.hostB = make([]float32, nn), make([]float32, nn)
	work.Fill(g.hostA, 1)
	work.Fill(g.hostB, 2)
	if err := cuda.CopyToDevice(g.a, g.hostA); err != nil {
		return g, err
	}
	if err := cuda.CopyToDevice(g.b, g.hostB); err != nil {
		return g, err
	}
	if g.me == 0 {
		g.hx = make([]float32, cfg.gpuSize/4)
		work.Fill(g.hx, 3)
	}
	return g, nil
}

// free releases what newGPUWork made, after the streams' work is done.
func (g *gpuWork) free() {
	if g.compute != nil {
		g.compute.Synchronize()
	}
	if g.comm != nil {
		g.comm.Synchronize()
	}
	for _, m := range []cuda.Slice[float32]{g.a, g.b, g.prod, g.after, g.msg} {
		m.Free()
	}
	g.compute.Destroy()
	g.comm.Destroy()
	g.k.Unload()
}

// prepare, untimed before each phase: rank 0's message as it was (the
// kernel behind WaitOn overwrote it), rank 1's zeroed, so that what is
// checked is what arrived.
func (g *gpuWork) prepare() error {
	if err := g.compute.Synchronize(); err != nil {
		return err
	}
	if g.me == 0 {
		return cuda.CopyToDevice(g.msg, g.hx)
	}
	return cuda.Memset(g.msg, 0)
}

// multiplies queues the phase's multiplies on the compute stream.
// With COURIER_TRACE set, the kernels show on the compute stream's
// track of the timeline, timed on the GPU (Comm.TraceOnStream), beside
// the message's span.
func (g *gpuWork) multiplies() error {
	span := g.c.TraceOnStream("sgemm ×"+strconv.Itoa(g.cfg.iters), g.compute)
	defer span.End()
	for range g.cfg.iters {
		if err := g.k.Multiply(g.prod, g.a, g.b, g.cfg.gpuN, g.compute); err != nil {
			return err
		}
	}
	return nil
}

// touch queues the kernel that uses the message's buffer: rank 0
// overwrites what it sends, rank 1 multiplies by what it received.
func (g *gpuWork) touch() error {
	span := g.c.TraceOnStream("sgemm on the message", g.compute)
	defer span.End()
	if g.me == 0 {
		return g.k.Multiply(g.front, g.a, g.b, g.cfg.gpuN, g.compute)
	}
	return g.k.Multiply(g.after, g.a, g.front, g.cfg.gpuN, g.compute)
}

// post starts the message.
func (g *gpuWork) post() *mp.Request {
	c := g.c
	switch {
	case g.cfg.onStream && g.me == 0:
		return mp.IsendOnStream(c, g.msg, 1, tagGPU, g.comm)
	case g.cfg.onStream:
		return mp.IrecvOnStream(c, g.msg, 0, tagGPU, g.comm)
	case g.me == 0:
		return mp.Isend(c, g.msg, 1, tagGPU)
	}
	return mp.Irecv(c, g.msg, 0, tagGPU)
}

// computeOnly runs the kernels with no message.
func (g *gpuWork) computeOnly() error {
	if err := g.multiplies(); err != nil {
		return err
	}
	if err := g.touch(); err != nil {
		return err
	}
	return g.compute.Synchronize()
}

// transferOnly moves the message with no kernel.
func (g *gpuWork) transferOnly() error {
	_, err := g.post().Wait()
	return err
}

// overlapped queues the kernels, posts the message, makes the compute
// stream wait for it (WaitOn) and queues the kernel that touches its
// buffer; the CPU then waits for both.
func (g *gpuWork) overlapped() error {
	if err := g.multiplies(); err != nil {
		return err
	}
	q := g.post()
	// The pitfall: touch's kernel uses the message's buffer, and the
	// compute stream does not know the transfer. WaitOn makes the stream
	// wait for it on the GPU, without a CPU wait (where the backend can;
	// elsewhere it waits on the CPU).
	if err := q.WaitOn(g.compute); err != nil {
		_, werr := q.Wait()
		return errors.Join(err, werr)
	}
	err := g.touch()
	serr := g.compute.Synchronize()
	_, werr := q.Wait()
	return errors.Join(err, serr, werr)
}

// check verifies, after the last overlapped phase, every product and the
// message, and prints what it found (on rank 1).
func (g *gpuWork) check(w io.Writer) error {
	c, n := g.c, g.cfg.gpuN
	host := make([]float32, n*n)
	var rows int
	err := cuda.CopyToHost(host, g.prod)
	if err == nil {
		rows, err = work.Check(host, g.hostA, g.hostB, n, rowsChecked)
	}
	if err := agree(c, "gpu matmul", err); err != nil {
		return err
	}
	fmt.Fprintf(w, "gpu matmul: %d rows of %d checked on each rank: exact\n", rows, n)

	// The kernels behind WaitOn: rank 0's product is in its send buffer;
	// rank 1's was made from what it received.
	msg := make([]float32, g.msg.Len())
	err = cuda.CopyToHost(msg, g.msg)
	if err == nil && g.me == 0 {
		_, err = work.Check(msg[:n*n], g.hostA, g.hostB, n, rowsChecked)
	}
	if err == nil && g.me == 1 {
		if err = cuda.CopyToHost(host, g.after); err == nil {
			_, err = work.Check(host, g.hostA, msg[:n*n], n, rowsChecked)
		}
	}
	if err := agree(c, "gpu kernel behind WaitOn", err); err != nil {
		return err
	}
	fmt.Fprintf(w, "gpu WaitOn: rank 1's kernel behind req.WaitOn(compute stream) multiplied by the whole message (%d rows checked: exact); rank 0's overwrote its send buffer after the send had read it (the checksums below)\n", rows)
	sum := work.Checksum(msg)
	if g.me == 0 {
		sum = work.Checksum(g.hx) // what it sent, before its kernel overwrote the buffer
	}
	return compareSums(c, w, "gpu", sum, tagGPUSum)
}
