package mp_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/courier-mp/courier/mp"
)

// benchColl runs op b.N times on every rank of an n-rank job, after a
// warm-up that fills the pools; ns/op and allocs/op are one call on every
// rank at once (allocations counted over all the ranks of the process).
func benchColl(b *testing.B, n, bytes int, op func(c *mp.Comm) error) {
	benchCollOn(b, "tcp", n, bytes, op)
}

// benchCollOn is benchColl over the named backend.
func benchCollOn(b *testing.B, backend string, n, bytes int, op func(c *mp.Comm) error) {
	comms := openRanks(b, n, backend)
	each := func(iters int) error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iters {
					if err := op(c); err != nil {
						errs[i] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := each(20); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	if err := each(b.N); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkColl measures the collectives of host buffers on 2 and 4
// in-process ranks over loopback TCP: Allreduce (float32 Sum) of 8 B and
// 1 MiB, Allgather of 8 B and 64 KiB per rank, Bcast of 8 B and 1 MiB,
// Alltoall of 64 B per pair and Barrier. allocs/op is what every rank of
// one call allocates together: 0 in steady state.
func BenchmarkColl(b *testing.B) {
	for _, np := range []int{2, 4} {
		for _, n := range []int{8, 1 << 20} {
			b.Run(fmt.Sprintf("Allreduce/np=%d/%s", np, sizeName(n)), func(b *testing.B) {
				bufs := make([][2][]float32, np)
				for i := range bufs {
					bufs[i] = [2][]float32{make([]float32, n/4), make([]float32, n/4)}
				}
				benchColl(b, np, n, func(c *mp.Comm) error {
					s := bufs[c.Rank()]
					return mp.Allreduce(c, s[0], s[1], mp.Sum)
				})
			})
		}
		for _, n := range []int{8, 64 << 10} {
			b.Run(fmt.Sprintf("Allgather/np=%d/%s", np, sizeName(n)), func(b *testing.B) {
				bufs := make([][2][]float32, np)
				for i := range bufs {
					bufs[i] = [2][]float32{make([]float32, n/4), make([]float32, np*n/4)}
				}
				benchColl(b, np, np*n, func(c *mp.Comm) error {
					s := bufs[c.Rank()]
					return mp.Allgather(c, s[0], s[1])
				})
			})
		}
		for _, n := range []int{8, 1 << 20} {
			b.Run(fmt.Sprintf("Bcast/np=%d/%s", np, sizeName(n)), func(b *testing.B) {
				bufs := make([][]float32, np)
				for i := range bufs {
					bufs[i] = make([]float32, n/4)
				}
				benchColl(b, np, n, func(c *mp.Comm) error {
					return mp.Bcast(c, bufs[c.Rank()], 0)
				})
			})
		}
		b.Run(fmt.Sprintf("Alltoall/np=%d/64B", np), func(b *testing.B) {
			bufs := make([][2][]float32, np)
			for i := range bufs {
				bufs[i] = [2][]float32{make([]float32, np*16), make([]float32, np*16)}
			}
			benchColl(b, np, np*64, func(c *mp.Comm) error {
				s := bufs[c.Rank()]
				return mp.Alltoall(c, s[0], s[1])
			})
		})
		b.Run(fmt.Sprintf("Barrier/np=%d", np), func(b *testing.B) {
			benchColl(b, np, 0, mp.Barrier)
		})
	}
}

// BenchmarkCollSHM measures Barrier and an 8-byte Allreduce on 2 and 4
// in-process ranks over the host backend, where they run through shared
// memory.
func BenchmarkCollSHM(b *testing.B) {
	for _, np := range []int{2, 4} {
		b.Run(fmt.Sprintf("Barrier/np=%d", np), func(b *testing.B) {
			benchCollOn(b, "host", np, 0, mp.Barrier)
		})
		b.Run(fmt.Sprintf("Allreduce/np=%d/8B", np), func(b *testing.B) {
			bufs := make([][]float32, np)
			for i := range bufs {
				bufs[i] = make([]float32, 2)
			}
			benchCollOn(b, "host", np, 8, func(c *mp.Comm) error {
				return mp.Allreduce(c, bufs[c.Rank()], bufs[c.Rank()], mp.Sum)
			})
		})
	}
	// 16 MiB: over the point-to-point path between the ranks' rings.
	const big = 16 << 20
	for _, np := range []int{2, 4} {
		bufs := make([][2][]float32, np)
		for i := range bufs {
			bufs[i] = [2][]float32{make([]float32, big/4), make([]float32, big/4)}
		}
		b.Run(fmt.Sprintf("Allreduce/np=%d/16MiB", np), func(b *testing.B) {
			benchCollOn(b, "host", np, big, func(c *mp.Comm) error {
				s := bufs[c.Rank()]
				return mp.Allreduce(c, s[0], s[1], mp.Sum)
			})
		})
		b.Run(fmt.Sprintf("Bcast/np=%d/16MiB", np), func(b *testing.B) {
			benchCollOn(b, "host", np, big, func(c *mp.Comm) error {
				return mp.Bcast(c, bufs[c.Rank()][0], 0)
			})
		})
		b.Run(fmt.Sprintf("Allgather/np=%d/16MiB", np), func(b *testing.B) {
			benchCollOn(b, "host", np, big, func(c *mp.Comm) error {
				s := bufs[c.Rank()]
				return mp.Allgather(c, s[0][:big/4/np], s[1])
			})
		})
	}
}

// BenchmarkScan compares Scan's two algorithms (float64 Sum) over
// loopback TCP, on 2, 4 and 8 ranks, from 8 B to 4 MiB: where recursive
// doubling gives way to the chain (mp's colltune.go, scanRD). Each call
// is followed by a Barrier (the rows Barrier alone measure it), or the
// chain's first ranks would run calls ahead of the last and measure
// throughput, not the time of one Scan.
func BenchmarkScan(b *testing.B) {
	for _, np := range []int{2, 4, 8} {
		for _, n := range []int{8, 4 << 10, 64 << 10, 512 << 10, 4 << 20} {
			for _, rd := range []bool{true, false} {
				name := map[bool]string{true: "RecursiveDoubling", false: "Chain"}[rd]
				b.Run(fmt.Sprintf("%s/np=%d/%s", name, np, sizeName(n)), func(b *testing.B) {
					defer mp.ForceScan(rd)()
					bufs := make([][2][]float64, np)
					for i := range bufs {
						bufs[i] = [2][]float64{make([]float64, n/8), make([]float64, n/8)}
					}
					benchColl(b, np, n, func(c *mp.Comm) error {
						s := bufs[c.Rank()]
						if err := mp.Scan(c, s[0], s[1], mp.Sum); err != nil {
							return err
						}
						return mp.Barrier(c)
					})
				})
			}
		}
		b.Run(fmt.Sprintf("Barrier/np=%d", np), func(b *testing.B) { benchColl(b, np, 0, mp.Barrier) })
	}
}
