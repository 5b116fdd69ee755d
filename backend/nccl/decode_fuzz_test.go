package nccl

import (
	"bytes"
	"errors"
	"testing"

	"github.com/courier-mp/courier/backend"
)

// FuzzEnvelope decodes arbitrary 32-byte envelopes, as a peer's host
// connection delivers them under checks: decoding never panics, an
// envelope that decodes encodes back to the same bytes (its padding is
// zeros), and one that does not is ErrCorrupt.
func FuzzEnvelope(f *testing.F) {
	var b [envSize]byte
	for _, e := range []envelope{
		{seq: 0, count: 4, tag: 3, typ: backend.Float32},
		{seq: 1 << 40, count: 1 << 33, tag: -2, typ: backend.Uint8},
		{seq: 7, count: -1, tag: 0, typ: backend.Int64},
		{seq: 7, count: 0, tag: 0, typ: backend.DType(200)},
	} {
		e.encode(&b)
		f.Add(b[:])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var in [envSize]byte
		copy(in[:], data)
		e, err := decodeEnvelope(&in)
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("decodeEnvelope: %v does not match ErrCorrupt", err)
			}
			return
		}
		if !e.typ.Valid() || e.count < 0 {
			t.Fatalf("decoded an envelope of type %d and count %d", e.typ, e.count)
		}
		var out [envSize]byte
		e.encode(&out)
		if !bytes.Equal(out[:21], in[:21]) {
			t.Fatalf("envelope %x re-encodes to %x", in, out)
		}
	})
}

// FuzzHello decodes arbitrary hellos, as the exchange of Open delivers
// them from each rank: decoding never panics, allocates the unique IDs
// only for a hello of exactly their size, and a hello that decodes
// encodes back to the same bytes. A malformed hello is ErrCorrupt; a
// rank's own refusal is its words, ErrNotSupported where it says so.
func FuzzHello(f *testing.F) {
	ids := make([][idBytes]byte, 2)
	ids[1][0] = 0x5a
	f.Add(encodeHello(&local{host: "node1", bus: "0000:17:00.0", ids: ids}, nil), uint8(2))
	f.Add(encodeHello(&local{host: "", bus: "", ids: make([][idBytes]byte, 4)}, nil), uint8(4))
	f.Add(encodeHello(nil, backend.ErrNotSupported), uint8(2))
	f.Add(encodeHello(nil, errors.New("no GPU")), uint8(2))
	f.Add([]byte{helloOK, 0xff, 0xff}, uint8(2))
	f.Add([]byte{9}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		n := int(size % 17)
		h, err := decodeHello(1, n, data)
		if err != nil {
			switch {
			case len(data) > 0 && data[0] == helloUnsupported:
				if !errors.Is(err, backend.ErrNotSupported) {
					t.Fatalf("a rank's ErrNotSupported became %v", err)
				}
			case len(data) > 0 && data[0] == helloFailed:
			case !errors.Is(err, backend.ErrCorrupt):
				t.Fatalf("decodeHello: %v does not match ErrCorrupt", err)
			}
			return
		}
		if len(h.ids) != n {
			t.Fatalf("a hello of %d ranks has %d IDs", n, len(h.ids))
		}
		if enc := encodeHello(&local{host: h.host, bus: h.bus, ipc: h.ipc, ids: h.ids}, nil); !bytes.Equal(enc, data) {
			t.Fatalf("hello %x re-encodes to %x", data, enc)
		}
	})
}
