package tcp

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

func frame(h engine.Header, payload []byte) []byte {
	var b [engine.HeaderSize]byte
	h.Encode(&b)
	return append(b[:], payload...)
}

// FuzzDecodeHeader: decoding never panics, and a header that decodes
// encodes back to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(frame(engine.Header{Kind: engine.KindEager, Type: backend.Float32, Tag: 3, Count: 4, Seq: 0}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindRTS, Type: backend.Uint8, Tag: 1, Count: 1 << 20, Seq: 9, SID: 4}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindCTS, Flags: engine.CTSTruncate, Seq: 2, SID: 4}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindData, Count: 4096, Seq: 2, SID: 8192}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindBye}, nil))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := engine.DecodeHeader(b, engine.EagerLimit)
		if err != nil {
			return
		}
		var out [engine.HeaderSize]byte
		h.Encode(&out)
		if string(out[:]) != string(b[:engine.HeaderSize]) {
			t.Fatalf("round trip changed the header: %x -> %x", b[:engine.HeaderSize], out)
		}
	})
}

// FuzzStream feeds arbitrary bytes to a rank as if they came from its
// peer: the rank must never panic, must end the receive it has posted one
// way or another, and must close cleanly.
func FuzzStream(f *testing.F) {
	eager := frame(engine.Header{Kind: engine.KindEager, Type: backend.Uint8, Tag: 0, Count: 3}, []byte("abc"))
	f.Add(eager)
	f.Add(append(eager, frame(engine.Header{Kind: engine.KindRTS, Type: backend.Uint8, Count: 1 << 20, Seq: 1, SID: 1}, nil)...))
	f.Add(frame(engine.Header{Kind: engine.KindData, Count: 10, Seq: 77}, make([]byte, 10)))
	f.Add(frame(engine.Header{Kind: engine.KindCTS, Seq: 1, SID: 123}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindEager, Type: backend.Uint8, Count: 2, Seq: 5}, []byte("xy")))
	f.Add(frame(engine.Header{Kind: engine.KindBye}, nil))
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		c, err := New(context.Background(), Options{Rank: 0, Size: 2, Conns: []net.Conn{nil, a}, Linger: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, 8)
		r, err := c.Irecv(backend.Buffer{Ptr: unsafePointer(dst), Count: 8, Type: backend.Uint8}, 1, backend.AnyTag, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			// Drain what the rank writes (CTS, BYE) so it never blocks.
			buf := make([]byte, 1024)
			for {
				if _, err := b.Read(buf); err != nil {
					return
				}
			}
		}()
		b.SetWriteDeadline(time.Now().Add(time.Second))
		b.Write(stream)
		// Every stream ends: after it, the peer goes away.
		b.Close()
		if _, err := r.Wait(5 * time.Second); err != nil && binary.Size(err) == 0 && err.Error() == "" {
			t.Fatal("empty error")
		}
		done, _, _ := r.Test()
		if !done {
			t.Fatal("the receive did not end after its peer went away")
		}
		r.Release()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
