package mp_test

import (
	"sync"
	"testing"

	"github.com/courier-mp/courier/mp"
)

// BenchmarkIallreduceOverlap: an Allreduce of 64 MiB (float64 sums, 2
// ranks on tcp in process) and a compute loop on the same rank, run one
// after the other ("serial") and at once ("overlap": Iallreduce, compute,
// Wait). The time saved is what the non-blocking form buys; on a machine
// of few cores the compute and the transport share them, so the saving is
// bounded by the idle time of each.
func BenchmarkIallreduceOverlap(b *testing.B) {
	const n = 64 << 20 / 8
	comms := openRanks(b, 2, "tcp")
	bufs := [2][]float64{make([]float64, n), make([]float64, n)}
	work := make([]float64, 1<<16)
	compute := func() {
		// About as long as the Allreduce on its own on one core.
		for range 700 {
			for i := range work {
				work[i] = work[i]*0.999 + 1
			}
		}
	}
	for _, mode := range []string{"serial", "overlap", "compute", "allreduce"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(n * 8)
			b.ReportAllocs()
			for range b.N {
				var wg sync.WaitGroup
				errs := [2]error{}
				for r, c := range comms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := bufs[r]
						switch mode {
						case "serial":
							errs[r] = mp.Allreduce(c, buf, buf, mp.Sum)
							compute()
						case "overlap":
							req, err := mp.Iallreduce(c, buf, buf, mp.Sum)
							if err != nil {
								errs[r] = err
								return
							}
							compute()
							_, errs[r] = req.Wait()
						case "compute":
							compute()
						case "allreduce":
							errs[r] = mp.Allreduce(c, buf, buf, mp.Sum)
						}
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
