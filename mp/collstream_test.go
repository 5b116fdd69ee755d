package mp

import (
	"testing"

	"github.com/courier-mp/courier/backend"
)

// TestCollCallNameOnStream: the reports name a stream-ordered collective
// as the program called it, and its kind is still found under the flags.
func TestCollCallNameOnStream(t *testing.T) {
	for call, want := range map[uint32]string{
		uint32(backend.Allreduce) | collNonblocking | collOnStream:     "IallreduceOnStream",
		uint32(backend.ReduceScatter) | collNonblocking | collOnStream: "IreduceScatterOnStream",
		uint32(backend.Allreduce) | collNonblocking:                    "Iallreduce",
		uint32(backend.Bcast): "Bcast",
	} {
		if got := collCallName(call); got != want {
			t.Errorf("collCallName(%#x) = %q, want %q", call, got, want)
		}
	}
	c := &Comm{rank: 0, size: 2}
	c.collCall.Store(uint32(backend.Alltoall) | collNonblocking | collOnStream)
	got := c.describeOp(backend.OpInfo{Op: "alltoall (nccl)", Peer: -1, Tag: -1, Count: 8, Type: backend.Int32})
	if want := "IalltoallOnStream (nccl) of 8 × int32"; got != want {
		t.Errorf("describeOp = %q, want %q", got, want)
	}
}
