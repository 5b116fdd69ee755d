package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
)

// The measurements behind the link's settings (docs/benchmarks.md, "Host
// path"): the eager limit, by sending the same sizes eagerly and by
// rendezvous, and the socket buffers, by streaming large messages with
// the kernel's autotuning and with fixed sizes.

// BenchmarkLoopbackPingPong measures a blocking round trip over loopback
// TCP; ns/op is one round trip.
func BenchmarkLoopbackPingPong(b *testing.B) {
	for _, n := range []int{1, 4 << 10, 16 << 10, 32 << 10, 64 << 10} {
		for _, eager := range []int64{0, 8 << 10} {
			b.Run(fmt.Sprintf("%dB/eager=%s", n, limitName(eager)), func(b *testing.B) {
				cs := loopbackWith(b, Options{eager: eager})
				buf := make([]byte, n)
				bb := backend.Buffer{Ptr: unsafePointer(buf), Count: int64(n), Type: backend.Uint8}
				done := make(chan error, 1)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				b.ResetTimer()
				go func() {
					echo := make([]byte, n)
					eb := backend.Buffer{Ptr: unsafePointer(echo), Count: int64(n), Type: backend.Uint8}
					for range b.N {
						if err := roundTrip(cs[1], eb, 0, false); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				for range b.N {
					if err := roundTrip(cs[0], bb, 1, true); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// roundTrip sends then receives (first) or receives then sends.
func roundTrip(c backend.Conn, buf backend.Buffer, peer int, first bool) error {
	one := func(send bool) error {
		var r backend.Request
		var err error
		if send {
			r, err = c.Isend(buf, peer, 0, 0)
		} else {
			r, err = c.Irecv(buf, peer, 0, 0)
		}
		if err != nil {
			return err
		}
		_, err = r.Wait(time.Minute)
		r.Release()
		return err
	}
	if err := one(first); err != nil {
		return err
	}
	return one(!first)
}

// BenchmarkLoopbackStream measures one-way bandwidth over loopback TCP:
// windows of 64 Isends (fewer for large messages: 256 MiB in flight at
// most), then a one-byte acknowledgement. ns/op is one message.
func BenchmarkLoopbackStream(b *testing.B) {
	type cfg struct {
		n       int
		eager   int64
		sockBuf int
	}
	var cfgs []cfg
	for _, n := range []int{16 << 10, 32 << 10, 64 << 10} {
		cfgs = append(cfgs, cfg{n, 0, 0}, cfg{n, 8 << 10, 0})
	}
	for _, n := range []int{1 << 20, 16 << 20} {
		for _, sb := range []int{0, 256 << 10, 1 << 20, 4 << 20} {
			cfgs = append(cfgs, cfg{n, 0, sb})
		}
	}
	for _, c := range cfgs {
		window := min(64, (256<<20)/c.n)
		sb := "auto"
		if c.sockBuf > 0 {
			sb = fmt.Sprintf("%dKiB", c.sockBuf>>10)
		}
		b.Run(fmt.Sprintf("%dKiB/eager=%s/sockbuf=%s", c.n>>10, limitName(c.eager), sb), func(b *testing.B) {
			if c.n >= 16<<20 && testing.Short() {
				b.Skip("large")
			}
			cs := loopbackWith(b, Options{eager: c.eager, sockBuf: c.sockBuf})
			src := make([]byte, c.n)
			dst := make([][]byte, window)
			for i := range dst {
				dst[i] = make([]byte, c.n)
			}
			var ack [1]byte
			ab := backend.Buffer{Ptr: unsafePointer(ack[:]), Count: 1, Type: backend.Uint8}
			// The last window is short, so that exactly b.N messages go.
			sizes := make([]int, 0, b.N/window+1)
			for left := b.N; left > 0; left -= window {
				sizes = append(sizes, min(window, left))
			}
			done := make(chan error, 1)
			b.SetBytes(int64(c.n))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				rreqs := make([]backend.Request, window)
				for _, w := range sizes {
					reqs := rreqs[:w]
					for i := range reqs {
						var err error
						if reqs[i], err = cs[1].Irecv(backend.Buffer{Ptr: unsafePointer(dst[i]), Count: int64(c.n), Type: backend.Uint8}, 0, 0, 0); err != nil {
							done <- err
							return
						}
					}
					if err := waitAll(reqs); err != nil {
						done <- err
						return
					}
					if err := roundTripHalf(cs[1], ab, 0, true); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			reqs := make([]backend.Request, window)
			sbuf := backend.Buffer{Ptr: unsafePointer(src), Count: int64(c.n), Type: backend.Uint8}
			for _, w := range sizes {
				reqs := reqs[:w]
				for i := range reqs {
					var err error
					if reqs[i], err = cs[0].Isend(sbuf, 1, 0, 0); err != nil {
						b.Fatal(err)
					}
				}
				if err := waitAll(reqs); err != nil {
					b.Fatal(err)
				}
				if err := roundTripHalf(cs[0], ab, 1, false); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func waitAll(reqs []backend.Request) error {
	for _, r := range reqs {
		_, err := r.Wait(time.Minute)
		r.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// roundTripHalf sends or receives one message with tag 1.
func roundTripHalf(c backend.Conn, buf backend.Buffer, peer int, send bool) error {
	var r backend.Request
	var err error
	if send {
		r, err = c.Isend(buf, peer, 1, 0)
	} else {
		r, err = c.Irecv(buf, peer, 1, 0)
	}
	if err != nil {
		return err
	}
	_, err = r.Wait(time.Minute)
	r.Release()
	return err
}

func limitName(eager int64) string {
	if eager == 0 {
		return "64KiB"
	}
	return fmt.Sprintf("%dKiB", eager>>10)
}
