//go:build linux

package shm

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

// The helpers of the two-process benchmarks; the parent sets the stop
// word (and rings) to end them.

func init() {
	// echo returns every record it receives, waiting as args[0] says
	// (see await).
	roles["echo"] = func(conn *net.UnixConn, args []string) error {
		p, _, err := childPair(conn)
		if err != nil {
			return err
		}
		mode := args[0]
		for {
			rec, err := p.await(mode)
			if err != nil || rec == nil {
				return err
			}
			out := p.out.Reserve(len(rec))
			for out == nil {
				out = p.out.Reserve(len(rec))
			}
			copy(out, rec)
			p.out.Commit()
			p.in.Consume()
			if mode != "spin" {
				p.peer.Ring()
			}
		}
	}
	// sink copies every record it receives into the next part of a
	// buffer, as a receive would, wrapping around, polling; at the stop it
	// prints the bytes it received. The buffer is args[0] bytes (default:
	// one record, so it stays in cache); with args[1] "stream" it copies
	// with CopyStream.
	roles["sink"] = func(conn *net.UnixConn, args []string) error {
		p, _, err := childPair(conn)
		if err != nil {
			return err
		}
		size := p.in.MaxRecord()
		if len(args) > 0 {
			size = atoi(args[0])
		}
		stream := len(args) > 1 && args[1] == "stream"
		buf := randomBytes(9, size)
		total, off := 0, 0
		for {
			rec, err := p.in.Next()
			if err != nil {
				return err
			}
			if rec == nil {
				if p.stop.Load() != 0 && p.in.Empty() {
					_, err := fmt.Fprintln(conn, total)
					return err
				}
				continue
			}
			if off+len(rec) > len(buf) {
				off = 0
			}
			var n int
			if stream {
				n = CopyStream(buf[off:], rec)
			} else {
				n = copy(buf[off:], rec)
			}
			off += n
			total += n
			p.in.Consume()
		}
	}
	// serve publishes a buffer of args[0] bytes for ReadFrom and waits.
	roles["serve"] = func(conn *net.UnixConn, args []string) error {
		buf := randomBytes(4, atoi(args[0]))
		if _, err := fmt.Fprintf(conn, "%#x\n", addr(buf)); err != nil {
			return err
		}
		bufio.NewScanner(conn).Scan()
		runtime.KeepAlive(buf)
		return nil
	}
}

// spinFor is how long await polls, in mode hybrid, before it sleeps.
const spinFor = 20 * time.Microsecond

// await returns the next record of p.in, or nil once the stop word is
// set, waiting as mode says: "spin" polls the ring; "bell" sleeps on this
// side's bell whenever the ring is empty; "hybrid" polls for spinFor, then
// sleeps, as a transport's waiter would.
func (p *pair) await(mode string) ([]byte, error) {
	polls := 0
	var until time.Time
	for {
		rec, err := p.in.Next()
		if rec != nil || err != nil {
			return rec, err
		}
		if p.stop.Load() != 0 {
			return nil, nil
		}
		switch mode {
		case "spin":
			continue
		case "hybrid":
			if polls++; polls%64 != 0 {
				continue
			}
			if until.IsZero() {
				until = time.Now().Add(spinFor)
			}
			if time.Now().Before(until) {
				continue
			}
		}
		v := p.me.Arm()
		if !p.in.Empty() || p.stop.Load() != 0 {
			p.me.Disarm()
			continue
		}
		if err := p.me.Sleep(v, time.Second); err != nil {
			return nil, err
		}
	}
}

func (p *pair) stopPeer(b *testing.B, c *child) {
	p.stop.Store(1)
	p.peer.Ring()
	c.wait(b)
}

var sizes = []struct {
	name string
	n    int
}{{"1B", 1}, {"64B", 64}, {"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}

// BenchmarkPingPong sends a record to another process, which returns it:
// one op is a round trip; ns/one-way is half of it. Both sides wait the
// same way (see await): spin, both poll their rings; bell, both sleep on
// their bells while they wait, so every trip is a futex wake-up of a
// sleeping process; hybrid, both poll for 20 µs first.
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range []string{"spin", "hybrid", "bell"} {
		for _, sz := range sizes[:3] {
			b.Run(mode+"/"+sz.name, func(b *testing.B) { benchPingPong(b, mode, sz.n) })
		}
	}
}

func benchPingPong(b *testing.B, mode string, size int) {
	p, c := startPair(b, "echo", 1<<16, mode)
	msg := make([]byte, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		rec := p.out.Reserve(size)
		for rec == nil {
			rec = p.out.Reserve(size)
		}
		copy(rec, msg)
		p.out.Commit()
		if mode != "spin" {
			p.peer.Ring()
		}
		r, err := p.await(mode)
		if err != nil {
			b.Fatal(err)
		}
		copy(msg, r)
		p.in.Consume()
		n++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*n), "ns/one-way")
	p.stopPeer(b, c)
}

// BenchmarkStream streams records to another process, which copies each
// out of the ring: a copy in and a copy out per record, both sides
// polling. The ring's capacity is in the name.
func BenchmarkStream(b *testing.B) {
	for _, sz := range sizes[2:4] {
		for _, ring := range []int{256 << 10, 1 << 20, 4 << 20} {
			b.Run(fmt.Sprintf("%s/ring=%dKiB", sz.name, ring>>10), func(b *testing.B) { benchStream(b, sz.n, ring) })
		}
	}
}

func benchStream(b *testing.B, size, capacity int) {
	streamTo(b, capacity, size, size)
}

// streamTo sends a buffer of size bytes, in records of chunk bytes, to the
// sink (started with args), once per op, and checks the bytes it got.
func streamTo(b *testing.B, capacity, size, chunk int, args ...string) {
	p, c := startPair(b, "sink", capacity, args...)
	src := randomBytes(5, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for off := 0; off < size; off += chunk {
			rec := p.out.Reserve(chunk)
			for rec == nil {
				rec = p.out.Reserve(chunk)
			}
			copy(rec, src[off:off+chunk])
			p.out.Commit()
			n++
		}
	}
	p.stop.Store(1)
	var total int
	fmt.Sscan(c.line(b), &total)
	c.wait(b)
	if total != n*chunk {
		b.Fatalf("the sink received %d bytes, want %d", total, n*chunk)
	}
}

// BenchmarkStreamLarge streams a 64 MiB buffer to another process in
// records of chunk bytes through a ring of the named capacity; the other
// process copies each record into the next part of its own 64 MiB buffer
// (with copy, or with CopyStream).
// Unlike BenchmarkStream, both ends copy from or to memory that is not in
// cache, as a large message's send and receive buffers are.
func BenchmarkStreamLarge(b *testing.B) {
	for _, sink := range []string{"copy", "stream"} {
		for _, chunk := range []int{16 << 10, 64 << 10, 256 << 10} {
			for _, ring := range []int{256 << 10, 1 << 20, 4 << 20} {
				if chunk*2 >= ring {
					continue
				}
				b.Run(fmt.Sprintf("%s/chunk=%dKiB/ring=%dKiB", sink, chunk>>10, ring>>10), func(b *testing.B) { benchStreamLarge(b, sink, chunk, ring) })
			}
		}
	}
}

func benchStreamLarge(b *testing.B, sink string, chunk, capacity int) {
	const size = 64 << 20
	streamTo(b, capacity, size, chunk, fmt.Sprint(size), sink)
}

// BenchmarkReadFrom copies another process's buffer with ReadFrom (one
// copy, by the kernel); BenchmarkCopy is a plain copy of the same size
// inside one process, for comparison.
func BenchmarkReadFrom(b *testing.B) {
	c := startChild(b, "serve", fmt.Sprint(16<<20))
	var remote uintptr
	if _, err := fmt.Sscan(c.line(b), &remote); err != nil {
		b.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	dst := randomBytes(6, 16<<20) // touched: no page faults in the loop
	for _, sz := range sizes[3:] {
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadFrom(pid, dst[:sz.n], remote); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	c.send(b, "stop")
	c.wait(b)
}

func BenchmarkCopy(b *testing.B) {
	src, dst := randomBytes(7, 16<<20), randomBytes(8, 16<<20)
	for _, sz := range sizes[3:] {
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst[:sz.n], src[:sz.n])
			}
		})
	}
}
