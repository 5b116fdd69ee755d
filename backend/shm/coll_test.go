//go:build linux

package shm

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/courier-mp/courier/backend"
)

// host describes n float32s of host memory (a placeholder address: the
// tables read only the description).
func host(n int64) backend.Buffer {
	return backend.Buffer{Ptr: unsafe.Pointer(new([8]byte)), Count: n, Type: backend.Float32, Mem: backend.Host}
}

// TestCollTake: which collectives run through shared memory.
func TestCollTake(t *testing.T) {
	dev := host(2)
	dev.Mem = backend.Device
	for _, tc := range []struct {
		co   backend.Coll
		size int
		want bool
	}{
		{backend.Coll{Kind: backend.Allreduce, Send: host(2), Recv: host(2), Op: backend.Sum}, 4, true},
		{backend.Coll{Kind: backend.Allreduce, Send: host(16 << 10 / 4), Recv: host(16 << 10 / 4), Op: backend.Sum}, 4, true},
		{backend.Coll{Kind: backend.Allreduce, Send: host(16<<10/4 + 1), Recv: host(16<<10/4 + 1), Op: backend.Sum}, 4, false},
		{backend.Coll{Kind: backend.Allreduce, Send: host(16 << 10 / 4), Recv: host(16 << 10 / 4), Op: backend.Sum}, 8, false},
		{backend.Coll{Kind: backend.Bcast, Send: host(collSlot / 4), Recv: host(collSlot / 4)}, 64, true},
		{backend.Coll{Kind: backend.Bcast, Send: host(collSlot/4 + 1), Recv: host(collSlot/4 + 1)}, 2, false},
		{backend.Coll{Kind: backend.Allgather, Send: host(2), Recv: host(8)}, 4, true},
		{backend.Coll{Kind: backend.Reduce, Send: host(2), Recv: host(2), Op: backend.Max}, 3, true},
		{backend.Coll{Kind: backend.ReduceScatter, Send: host(8), Recv: host(2), Op: backend.Sum}, 4, false},
		{backend.Coll{Kind: backend.Alltoall, Send: host(8), Recv: host(8)}, 4, false},
		{backend.Coll{Kind: backend.Barrier}, 16, true},
		{backend.Coll{Kind: backend.Allreduce, Send: dev, Recv: dev, Op: backend.Sum}, 4, false},
	} {
		assert.Equal(t, tc.want, take(&tc.co, tc.size), "%v of %d bytes on %d ranks", tc.co.Kind, tc.co.Send.Len(), tc.size)
	}
	for _, b := range CollThresholds() {
		assert.LessOrEqual(t, b, int64(collSlot), "a threshold beyond the slot")
	}
}

// TestCollDesc: what a rank's descriptor says, for ErrMismatch.
func TestCollDesc(t *testing.T) {
	b := backend.Buffer{Count: 3, Type: backend.Int16, Mem: backend.Host}
	d := collDesc(&backend.Coll{Kind: backend.Reduce, Send: b, Op: backend.Max, Root: 5})
	assert.Equal(t, "reduce of 6 bytes of int16 with max (root 5)", sayDesc(d))
	d = collDesc(&backend.Coll{Kind: backend.Allgather, Send: b, Op: backend.Max, Root: 5})
	assert.Equal(t, "allgather of 6 bytes of int16", sayDesc(d), "the operator and root of a collective without them do not count")
}

// TestCollAbsent: a hub whose job has ranks on other hosts has no
// collectives, and a nil Coll hands every collective back.
func TestCollAbsent(t *testing.T) {
	var c *Coll
	_, err := c.Collective(backend.Coll{Kind: backend.Bcast})
	assert.ErrorIs(t, err, backend.ErrSkip)
	_, ok := c.Pending()
	assert.False(t, ok)
}

// TestStreamSlot: which slots are written with non-temporal stores.
func TestStreamSlot(t *testing.T) {
	for _, tc := range []struct {
		co   backend.Coll
		size int
		want bool
	}{
		{backend.Coll{Kind: backend.Bcast, Send: host(1024), Recv: host(1024)}, 2, true}, // 4 KiB of float32
		{backend.Coll{Kind: backend.Bcast, Send: host(1023), Recv: host(1023)}, 2, false},
		{backend.Coll{Kind: backend.Bcast, Send: host(1024), Recv: host(1024)}, 4, false},
		{backend.Coll{Kind: backend.Bcast, Send: host(4096), Recv: host(4096)}, 4, true},
		{backend.Coll{Kind: backend.Allgather, Send: host(4096), Recv: host(4 * 4096)}, 4, false},
		{backend.Coll{Kind: backend.Allreduce, Send: host(4096), Recv: host(4096)}, 2, false},
	} {
		assert.Equal(t, tc.want, streamSlot(&tc.co, tc.size), "%v of %d bytes on %d ranks", tc.co.Kind, tc.co.Send.Len(), tc.size)
	}
}
