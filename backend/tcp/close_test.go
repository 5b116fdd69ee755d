package tcp

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/stretchr/testify/require"
)

// TestPipeCloseTogetherNeedsNoLinger: two ranks over connections without
// a descriptor (net.Pipe) that close at once have both said goodbye, so
// neither Close waits out the linger for a stream end that only the
// other's Close would bring.
func TestPipeCloseTogetherNeedsNoLinger(t *testing.T) {
	const linger = 10 * time.Second
	a, b := net.Pipe()
	conns := [][]net.Conn{{nil, a}, {b, nil}}
	cs := make([]backend.Conn, 2)
	for i := range cs {
		c, err := New(context.Background(), Options{Rank: i, Size: 2, Conns: conns[i], Linger: linger})
		require.NoError(t, err)
		cs[i] = c
	}
	// Traffic first, so that both links are in use when they close.
	src, dst := []byte("goodbye!"), make([]byte, 8)
	rr, err := cs[1].Irecv(bufOf(dst, backend.Uint8), 0, 0, 0)
	require.NoError(t, err)
	sr, err := cs[0].Isend(bufOf(src, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	for _, r := range []backend.Request{sr, rr} {
		_, err := r.Wait(5 * time.Second)
		require.NoError(t, err)
		r.Release()
	}
	require.Equal(t, src, dst)

	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { require.NoError(t, c.Close()) })
	}
	wg.Wait()
	// Half the linger: a close that waits for it takes all of it.
	require.Less(t, time.Since(start), linger/2, "closing both ranks together waited for the linger")
}
