package tcp

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fdPair connects a loopback pair and moves the dialling side onto an
// fdConn; the other side is a plain *net.TCPConn.
func fdPair(t *testing.T) (*fdConn, net.Conn) {
	t.Helper()
	srv, d := dialPair(t)
	fc, err := newFDConn(d.(*net.TCPConn))
	require.NoError(t, err)
	t.Cleanup(func() { fc.Close(); srv.Close() })
	return fc, srv
}

// TestFDConnWritesWait: Write and writev, whose system calls are raw, hand
// over every byte in order when the socket fills (EAGAIN, then a wait for
// room) while the peer reads slowly, and a closed connection refuses
// them with net.ErrClosed.
func TestFDConnWritesWait(t *testing.T) {
	fc, srv := fdPair(t)
	big := make([]byte, 12<<20) // far past the socket's buffers
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	hdr := []byte("a header of forty bytes, give or take..")
	want := append(append(append([]byte{}, big...), hdr...), big[:5<<20]...)
	got := make(chan []byte, 1)
	go func() {
		var all []byte
		buf := make([]byte, 256<<10)
		for len(all) < len(want) {
			n, err := srv.Read(buf)
			all = append(all, buf[:n]...)
			if err != nil {
				break
			}
			time.Sleep(100 * time.Microsecond) // slower than the writer
		}
		got <- all
	}()
	n, err := fc.Write(big)
	require.NoError(t, err)
	require.Equal(t, len(big), n)
	require.NoError(t, fc.writev(hdr, big[:5<<20]))
	select {
	case all := <-got:
		require.Equal(t, len(want), len(all))
		assert.True(t, bytes.Equal(want, all), "the bytes read differ from those written")
	case <-time.After(20 * time.Second):
		t.Fatal("the reader did not get every byte")
	}

	require.NoError(t, fc.Close())
	_, err = fc.Write([]byte{1})
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.ErrorIs(t, fc.writev(hdr, nil), net.ErrClosed)
	b := make([]byte, 1)
	_, err = srv.Read(b)
	assert.ErrorIs(t, err, io.EOF, "the peer sees the end")
}
