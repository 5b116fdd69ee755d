package nccl

import (
	"context"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// nullEngine completes every group at its first poll and moves nothing:
// with it, a communicator's cost per operation is its own.
type nullEngine struct{}

func (nullEngine) launch(*group) (bool, error)                    { return false, nil }
func (nullEngine) settle(int) (bool, error)                       { return false, nil }
func (nullEngine) seal(*group) error                              { return nil }
func (nullEngine) poll(*group) (bool, error)                      { return true, nil }
func (nullEngine) finish(*group)                                  {}
func (nullEngine) release(*group)                                 {}
func (nullEngine) waitOn(*group, *cuda.Stream) error              { return nil }
func (nullEngine) follow(int, *cuda.Stream) error                 { return nil }
func (nullEngine) copyBytes(_, _ unsafe.Pointer, _ int64) error   { return nil }
func (nullEngine) allocTemp(int64) (*tempMem, error)              { return &tempMem{}, nil }
func (nullEngine) copyTemp(backend.Buffer, *tempMem, int64) error { return nil }
func (nullEngine) freeTemp(*tempMem)                              {}
func (nullEngine) detach(int) func() error                        { return nil }
func (nullEngine) close() error                                   { return nil }

func init() { backend.Register("nccl-null", nullDriver{}) }

// nullDriver opens communicators on a nullEngine (with a real host
// connection): what mp and the communicator cost per message, with
// nothing behind them. Registered as "nccl-null" in this package's tests.
type nullDriver struct{}

func (nullDriver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	var ctl *control
	if cfg.Job.Size > 1 {
		var err error
		if ctl, err = openControl(ctx, cfg, false); err != nil {
			return nil, err
		}
	}
	return newConn(connOptions{rank: cfg.Job.Rank, size: cfg.Job.Size, check: cfg.Check, eng: nullEngine{}, ctl: ctl}), nil
}

// BenchmarkOverhead measures what the communicator itself costs per
// operation (Isend or Irecv, Wait, Release) on the CPU, with an engine that
// takes no time: the part of a message's latency that is courier's, beside
// NCCL's launch and the GPU. There is no peer: each operation completes at
// its first poll.
func BenchmarkOverhead(b *testing.B) {
	c := newConn(connOptions{rank: 0, size: 2, eng: nullEngine{}})
	defer c.Close()
	buf := bufOf(make([]int64, 1), backend.Int64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var (
			q   backend.Request
			err error
		)
		if i%2 == 0 {
			q, err = c.Isend(buf, 1, 0, 0)
		} else {
			q, err = c.Irecv(buf, 1, 0, 0)
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := q.Wait(0); err != nil {
			b.Fatal(err)
		}
		q.Release()
	}
}
