package faultproxy

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/engine"
	"github.com/courier-mp/courier/internal/leakcheck"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Check(m.Run()))
}

// frame returns a sealed frame of kind k with a payload of n bytes.
func frame(k uint8, n int) []byte {
	h := engine.Header{Kind: k, Type: 2, Tag: 9, Count: int64(n)} // Type 2: a one-byte type
	if k == engine.KindData {
		h.Type = 0
	}
	var b [engine.HeaderSize]byte
	h.Encode(&b)
	engine.Seal(&b)
	return append(b[:], bytes.Repeat([]byte{0xAB}, n)...)
}

// through sends prefix and frames through a proxy with o and returns what
// reached the target (until the proxy's side of it ended).
func through(t *testing.T, o Options, prefix []byte, frames ...[]byte) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	p, err := Listen(ln.Addr().String(), o)
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	c.Write(prefix)
	for _, f := range frames {
		c.Write(f)
	}
	c.(*net.TCPConn).CloseWrite()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	return got
}

func TestFlipSkipAndMatch(t *testing.T) {
	eager := frame(engine.KindEager, 8)
	prefix := []byte("hello, handshake")
	got := through(t, Options{
		Skip:   [2]int64{int64(len(prefix)), 0},
		Faults: []Fault{{Dir: Up, Match: Kind(engine.KindEager, 1), Action: Flip, Offset: HeaderField["tag"], Mask: 0x02}},
	}, prefix, eager, eager, eager)
	want := append(append(append(append([]byte{}, prefix...), eager...), eager...), eager...)
	at := len(prefix) + len(eager) + HeaderField["tag"] // the second frame's tag
	want[at] ^= 0x02
	assert.Equal(t, want, got)
}

func TestCutPartWay(t *testing.T) {
	data := frame(engine.KindData, 100)
	got := through(t, Options{Faults: []Fault{{Dir: Up, Match: Nth(1), Action: Cut, Offset: 50}}}, nil, data, data, data)
	assert.Equal(t, append(append([]byte{}, data...), data[:50]...), got)
}

func TestBlackholeSwallows(t *testing.T) {
	cts := frame(engine.KindCTS, 0)
	got := through(t, Options{Faults: []Fault{{Dir: Up, Match: Nth(2), Action: Blackhole}}}, nil, cts, cts, cts, cts)
	assert.Equal(t, append(append([]byte{}, cts...), cts...), got)
}

// An unparsable header (here a kind that does not exist) and what follows
// it go through untouched: the proxy stops parsing, it does not stop
// relaying.
func TestUnknownFramePassesThrough(t *testing.T) {
	junk := bytes.Repeat([]byte{0xEE}, 100)
	got := through(t, Options{Faults: []Fault{{Dir: Up, Action: Flip, Offset: 0}}}, nil, junk)
	assert.Equal(t, junk, got)
}
