package tcp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/auth"
	"github.com/courier-mp/courier/internal/engine"
)

// An acceptor of another protocol version (an older courier) is refused
// by the dialer, with both versions in the reason.
func TestHandshakeRefusesOldAcceptor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		hello := append([]byte(hsMagic), binary.LittleEndian.AppendUint16(nil, 1)...)
		nonce := auth.Nonce()
		b.Write(append(hello, nonce[:]...))
		io.Copy(io.Discard, b)
	}()
	hs := handshake{key: "k", rank: 1, size: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := hs.dial(ctx, a, 0)
	require.ErrorIs(t, err, errHandshake)
	assert.ErrorContains(t, err, "protocol version 1, this rank version 2")
}

// A dialer of another protocol version is told why the acceptor refuses
// it: the refusal's text names both versions.
func TestHandshakeTellsOldDialerWhy(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	hs := handshake{key: "k", rank: 0, size: 2}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := hs.accept(ctx, a, func(int) string { return "" }, func(int) {})
		done <- err
	}()
	var hello [helloSize]byte
	_, err := io.ReadFull(b, hello[:])
	require.NoError(t, err)
	claim := append([]byte(hsMagic), binary.LittleEndian.AppendUint16(nil, 1)...)
	claim = append(claim, ranksBytes(1, 2)...)
	claim = append(claim, make([]byte, auth.NonceSize+auth.MACSize)...)
	_, err = b.Write(claim)
	require.NoError(t, err)
	var status [1]byte
	_, err = io.ReadFull(b, status[:])
	require.NoError(t, err)
	require.Equal(t, byte(hsRefused), status[0])
	why := readRefusal(b)
	assert.ErrorContains(t, why, "protocol version 1, this rank version 2")
	aerr := <-done
	require.ErrorIs(t, aerr, errHandshake)
	assert.ErrorContains(t, aerr, "version 1")
}

// A frame header altered on the way (its check word no longer matches)
// closes the link: the pending receive fails with ErrPeerLost and
// ErrCorrupt, naming the corrupt header, and the peer sees the link end.
func TestCorruptHeaderClosesLink(t *testing.T) {
	a, b := net.Pipe()
	c, err := New(context.Background(), Options{Rank: 0, Size: 2, Conns: []net.Conn{nil, a}, Linger: 100 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	dst := make([]byte, 8)
	r, err := c.Irecv(bufOf(dst, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	ended := make(chan struct{})
	go func() {
		io.Copy(io.Discard, b) // returns when rank 0 closes the link
		close(ended)
	}()
	f := frame(engine.Header{Kind: engine.KindEager, Type: backend.Uint8, Count: 3}, []byte("abc"))
	f[8] ^= 0x01 // the count: 2 instead of 3, a frame that would decode
	_, err = b.Write(f)
	require.NoError(t, err)
	_, err = r.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	require.ErrorIs(t, err, backend.ErrCorrupt)
	assert.ErrorContains(t, err, "fails its check")
	r.Release()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the link with a corrupt header was not closed")
	}
	b.Close()
}
