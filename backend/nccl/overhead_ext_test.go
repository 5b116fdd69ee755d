package nccl_test

import (
	"os"
	"testing"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// BenchmarkSendRecvOverhead measures what a blocking mp.Send or mp.Recv
// costs the CPU on the nccl backend's communicator, from the call to its
// return, with an engine that completes every group at its first poll
// ("nccl-null"): what courier adds to a message's latency beside NCCL's
// launch and the GPU. Rank 0 alternates Send and Recv to rank 1, which
// only waits for it to finish (the null engine needs no peer).
func BenchmarkSendRecvOverhead(b *testing.B) {
	done := make(chan struct{})
	err := ranktest.Go(2, func(c *mp.Comm) error {
		if c.Rank() != 0 {
			<-done
			return nil
		}
		defer close(done)
		buf := make([]byte, 8)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			var err error
			if i%2 == 0 {
				err = mp.Send(c, buf, 1, 1)
			} else {
				_, err = mp.Recv(c, buf, 1, 1)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}, overheadOptions()...)
	if err != nil {
		b.Fatal(err)
	}
}

// overheadOptions are the ranks' options: the null engine, and the
// timeline when COURIER_TRACE is set (its cost, docs/benchmarks.md).
func overheadOptions() []mp.Option {
	opts := []mp.Option{mp.WithBackend("nccl-null")}
	if spec := os.Getenv("COURIER_TRACE"); spec != "" {
		opts = append(opts, mp.WithTrace(spec))
	}
	return opts
}
