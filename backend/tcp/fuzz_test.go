package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

// frame is a frame as the TCP link writes it: the header sealed with its
// check word, then the payload.
func frame(h engine.Header, payload []byte) []byte {
	var b [engine.HeaderSize]byte
	h.Encode(&b)
	engine.Seal(&b)
	return append(b[:], payload...)
}

// FuzzDecodeHeader: decoding and verifying never panic, a header that
// decodes encodes back to the same bytes (but its check word), and a
// header verifies exactly when its check word is the CRC32-C of the rest.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(frame(engine.Header{Kind: engine.KindEager, Type: backend.Float32, Tag: 3, Count: 4, Seq: 0}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindEager, Type: backend.Float32, Tag: 3, Count: 4, Seq: 1, Comm: 0x9e3779b9}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindRTS, Type: backend.Uint8, Tag: 1, Count: 1 << 20, Seq: 9, SID: 4}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindRTS, Type: backend.Uint8, Tag: -2, Count: 1 << 20, Seq: 9, SID: 4, Comm: 7}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindCTS, Flags: engine.CTSTruncate, Seq: 2, SID: 4}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindData, Count: 4096, Seq: 2, SID: 8192}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindLeave, Flags: engine.ByeAborted, Comm: 3}, nil))
	f.Add(frame(engine.Header{Kind: engine.KindLeave}, nil)) // of communicator 0: malformed
	f.Add(frame(engine.Header{Kind: engine.KindBye}, nil))
	corrupt := frame(engine.Header{Kind: engine.KindEager, Type: backend.Int32, Count: 1}, nil)
	corrupt[9] ^= 0x10
	f.Add(corrupt)
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		verr := engine.Verify(b)
		h, err := engine.DecodeHeader(b, engine.EagerLimit)
		if err != nil {
			return
		}
		var out [engine.HeaderSize]byte
		h.Encode(&out)
		if string(out[:engine.CheckOffset]) != string(b[:engine.CheckOffset]) {
			t.Fatalf("round trip changed the header: %x -> %x", b[:engine.CheckOffset], out[:engine.CheckOffset])
		}
		engine.Seal(&out)
		if sealed := string(out[engine.CheckOffset:]) == string(b[engine.CheckOffset:engine.HeaderSize]); sealed != (verr == nil) {
			t.Fatalf("Verify says %v for a header whose check word is %x (the CRC32-C is %x)", verr, b[engine.CheckOffset:engine.HeaderSize], out[engine.CheckOffset:])
		}
		if verr != nil && !errors.Is(verr, backend.ErrCorrupt) {
			t.Fatalf("Verify's error %v does not match ErrCorrupt", verr)
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
	f.Add(frame(engine.Header{Kind: engine.KindEager, Type: backend.Uint8, Count: 3, Comm: 5}, []byte("abc")))
	f.Add(append(frame(engine.Header{Kind: engine.KindLeave, Comm: 5}, nil), eager...))
	bad := frame(engine.Header{Kind: engine.KindEager, Type: backend.Uint8, Tag: 0, Count: 3}, []byte("abc"))
	bad[4] ^= 1 // the tag, after sealing
	f.Add(bad)
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
