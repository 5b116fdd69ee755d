package mp_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// benchBackends are the host backends the benchmarks compare: TCP over
// loopback, and the host backend (shared memory between the two ranks).
var benchBackends = []string{"tcp", "host"}

// pair opens a 2-rank job in this process over the named backend.
func pair(b *testing.B, backend string) (c0, c1 *mp.Comm) {
	b.Helper()
	c := openRanks(b, 2, backend)
	return c[0], c[1]
}

// openRanks opens an n-rank job in this process over the named backend,
// with opts; the communicators close when b ends.
func openRanks(b testing.TB, n int, backend string, opts ...mp.Option) []*mp.Comm {
	b.Helper()
	jobs, err := ranktest.Jobs(n)
	if err != nil {
		b.Fatal(err)
	}
	comms := make([]*mp.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o := append([]mp.Option{mp.WithJob(jobs[i]), mp.WithBackend(backend),
				mp.WithTimeout(time.Minute), mp.WithEnv(func(string) string { return "" })}, opts...)
			if spec := os.Getenv("COURIER_TRACE"); spec != "" {
				// The benchmarks measure the timeline's cost with it set
				// (docs/benchmarks.md); the environment is otherwise not read.
				o = append(o, mp.WithTrace(spec))
			}
			comms[i], errs[i] = mp.Init(ctx, o...)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		var wg sync.WaitGroup
		for _, c := range comms {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	})
	return comms
}

var sizes = []int{1, 4 << 10, 64 << 10, 1 << 20, 64 << 20}

// benchCase is one backend and one message size.
type benchCase struct {
	backend string
	n       int
}

func (c benchCase) name() string { return c.backend + "/" + sizeName(c.n) }

// cases pairs every benchmark backend with every size.
func cases(sizes []int) []benchCase {
	var out []benchCase
	for _, be := range benchBackends {
		for _, n := range sizes {
			out = append(out, benchCase{be, n})
		}
	}
	return out
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkPingPong measures a blocking round trip between two ranks; ns/op
// is one round trip (the one-way latency is half of it).
func BenchmarkPingPong(b *testing.B) {
	for _, bc := range cases(sizes) {
		n := bc.n
		b.Run(bc.name(), func(b *testing.B) {
			c0, c1 := pair(b, bc.backend)
			buf0, buf1 := make([]byte, n), make([]byte, n)
			done := make(chan error, 1)
			b.SetBytes(int64(2 * n))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					if _, err := mp.Recv(c1, buf1, 0, 0); err != nil {
						done <- err
						return
					}
					if err := mp.Send(c1, buf1, 0, 0); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for i := 0; i < b.N; i++ {
				if err := mp.Send(c0, buf0, 1, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := mp.Recv(c0, buf0, 1, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkStream measures one-way bandwidth: windows of 64 Isends of one
// size, received with Irecvs, then a one-byte acknowledgement (the OSU
// bandwidth pattern). ns/op is one message.
func BenchmarkStream(b *testing.B) {
	const window = 64
	for _, bc := range cases(sizes) {
		n := bc.n
		if n*window > 512<<20 {
			continue
		}
		b.Run(bc.name(), func(b *testing.B) {
			c0, c1 := pair(b, bc.backend)
			src := make([]byte, n)
			dst := make([][]byte, window)
			for i := range dst {
				dst[i] = make([]byte, n)
			}
			ack := make([]byte, 1)
			rounds := (b.N + window - 1) / window
			done := make(chan error, 1)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				reqs := make([]*mp.Request, window)
				for r := 0; r < rounds; r++ {
					for i := range reqs {
						reqs[i] = mp.Irecv(c1, dst[i], 0, 0)
					}
					if err := mp.WaitAll(reqs...); err != nil {
						done <- err
						return
					}
					if err := mp.Send(c1, ack, 0, 1); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			reqs := make([]*mp.Request, window)
			for r := 0; r < rounds; r++ {
				for i := range reqs {
					reqs[i] = mp.Isend(c0, src, 1, 0)
				}
				if err := mp.WaitAll(reqs...); err != nil {
					b.Fatal(err)
				}
				if _, err := mp.Recv(c0, ack, 1, 1); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkExchange measures a head-to-head exchange: both ranks post an
// Irecv and an Isend of the same size, then wait. SetBytes counts one
// direction.
func BenchmarkExchange(b *testing.B) {
	for _, bc := range cases([]int{64 << 10, 16 << 20}) {
		n := bc.n
		b.Run(bc.name(), func(b *testing.B) {
			c0, c1 := pair(b, bc.backend)
			done := make(chan error, 1)
			bufs := [2][2][]byte{{make([]byte, n), make([]byte, n)}, {make([]byte, n), make([]byte, n)}}
			side := func(c *mp.Comm) error {
				out, in := bufs[c.Rank()][0], bufs[c.Rank()][1]
				for i := 0; i < b.N; i++ {
					r := mp.Irecv(c, in, 1-c.Rank(), 0)
					s := mp.Isend(c, out, 1-c.Rank(), 0)
					if err := mp.WaitAll(r, s); err != nil {
						return err
					}
				}
				return nil
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			go func() { done <- side(c1) }()
			if err := side(c0); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPath is one small message's whole path through mp on both
// sides, in one goroutine: a blocking Send from rank 0 (eager: it returns
// once the message is in the link), then rank 1's blocking Recv, which
// takes it. No other core is involved: ns/op is the software's cost of a
// message, what a ping-pong's one-way time adds to the hardware's.
func BenchmarkPath(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be, func(b *testing.B) {
			c0, c1 := pair(b, be)
			buf0, buf1 := make([]byte, 1), make([]byte, 1)
			b.ReportAllocs()
			for b.Loop() {
				if err := mp.Send(c0, buf0, 1, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := mp.Recv(c1, buf1, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
