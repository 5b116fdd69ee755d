package nccl

import (
	"bytes"
	"errors"
	"testing"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
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
// them from each rank: decoding never panics, and a hello that decodes
// encodes back to the same bytes. A malformed hello is ErrCorrupt; a
// rank's own refusal is its words, ErrNotSupported where it says so.
func FuzzHello(f *testing.F) {
	f.Add(encodeHello(&local{host: "node1", bus: "0000:17:00.0", ipc: true}, nil))
	f.Add(encodeHello(&local{host: "", bus: "", world: true}, nil))
	f.Add(encodeHello(nil, backend.ErrNotSupported))
	f.Add(encodeHello(nil, errors.New("no GPU")))
	f.Add([]byte{helloOK, 0xff, 0xff})
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHello(1, data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		if enc := encodeHello(&local{host: h.host, bus: h.bus, ipc: h.ipc, world: h.world}, nil); !bytes.Equal(enc, data) {
			t.Fatalf("hello %x re-encodes to %x", data, enc)
		}
	})
}

// checkRefusal checks the error of a part of Open's exchange that did not
// decode: the rank's own ErrNotSupported, its own failure, or ErrCorrupt.
func checkRefusal(t *testing.T, data []byte, err error) {
	t.Helper()
	switch {
	case len(data) > 0 && data[0] == helloUnsupported:
		if !errors.Is(err, backend.ErrNotSupported) {
			t.Fatalf("a rank's ErrNotSupported became %v", err)
		}
	case len(data) > 0 && data[0] == helloFailed:
	case !errors.Is(err, backend.ErrCorrupt):
		t.Fatalf("%v does not match ErrCorrupt", err)
	}
}

// FuzzIDs decodes arbitrary lists of NCCL unique IDs (the second round of
// Open's exchange): decoding never panics, gives exactly one ID per rank,
// and a list that decodes encodes back to the same bytes.
func FuzzIDs(f *testing.F) {
	ids := make([][idBytes]byte, 2)
	ids[1][0] = 0x5a
	f.Add(encodeIDs(ids, nil), uint8(2))
	f.Add(encodeIDs(make([][idBytes]byte, 4), nil), uint8(4))
	f.Add(encodeIDs(nil, backend.ErrNotSupported), uint8(2))
	f.Add(encodeIDs(nil, errors.New("no NCCL")), uint8(2))
	f.Add([]byte{9}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		n := int(size % 17)
		ids, err := decodeIDs(1, n, data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		if len(ids) != n {
			t.Fatalf("a list for %d ranks has %d IDs", n, len(ids))
		}
		if enc := encodeIDs(ids, nil); !bytes.Equal(enc, data) {
			t.Fatalf("IDs %x re-encode to %x", data, enc)
		}
	})
}

// FuzzIPCDesc decodes arbitrary descriptors of the IPC path, as the host
// connection delivers them from a rank that shares this one's GPU:
// decoding never panics; a descriptor that decodes has a valid type, a
// count in range, an inline payload of exactly the message's size or a
// region that holds the message (or, a forget, no message and an
// allocation to forget), and encodes back to the same bytes; one that
// does not is ErrCorrupt.
func FuzzIPCDesc(f *testing.F) {
	buf := make([]byte, ipcDescSize+ipcInline)
	for _, d := range []ipcDesc{
		{seq: 3, count: 2, tag: 7, typ: backend.Float64, inline: true, data: make([]byte, 16)},
		{seq: 1 << 33, count: 1 << 20, tag: 0, typ: backend.Float32, region: cuda.IPCRegion{ID: 9, Offset: 64, Size: 8 << 20}},
		{seq: 0, count: 0, tag: 1, typ: backend.Uint8, inline: true},
		{seq: 5, count: 4, tag: 2, typ: backend.Int32, region: cuda.IPCRegion{ID: 1, Offset: 10, Size: 20}}, // passes the region's end
		{seq: 6, typ: backend.Uint8, forget: true, region: cuda.IPCRegion{ID: 12}},
		{seq: 7, count: 1, typ: backend.Uint8, forget: true, region: cuda.IPCRegion{ID: 12, Size: 4}}, // a forget with a message
	} {
		n := d.encode(buf)
		f.Add(append([]byte(nil), buf[:n]...))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeIPCDesc(data)
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("decodeIPCDesc: %v does not match ErrCorrupt", err)
			}
			return
		}
		n := d.bytes()
		if !d.typ.Valid() || d.count < 0 || n < 0 {
			t.Fatalf("decoded %d × type %d (%d bytes)", d.count, d.typ, n)
		}
		if d.forget && (d.inline || n != 0 || d.region.ID == 0) {
			t.Fatalf("a forget of allocation %d with a message of %d bytes (inline %v)", d.region.ID, n, d.inline)
		}
		if d.inline && int64(len(d.data)) != n {
			t.Fatalf("an inline payload of %d bytes for %d", len(d.data), n)
		}
		if !d.inline && n > 0 && (d.region.Offset < 0 || d.region.Offset+n > d.region.Size) {
			t.Fatalf("%d bytes at %d of a region of %d", n, d.region.Offset, d.region.Size)
		}
		out := make([]byte, ipcDescSize+ipcInline)
		m := d.encode(out)
		if m != len(data) || !bytes.Equal(out[:m], data) {
			t.Fatalf("descriptor %x re-encodes to %x", data, out[:m])
		}
	})
}
