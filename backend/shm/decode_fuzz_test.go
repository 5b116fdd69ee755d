package shm

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// FuzzSetup reads arbitrary setup messages, as a local peer sends them
// beside its inbox, against a segment of arbitrary length: parsing never
// panics and what parses encodes back to the same bytes; a message that
// passes check puts the peer's ring and collective area inside the
// segment, where attaching them reads nothing outside it; every refusal
// is ErrCorrupt or ErrMismatch.
func FuzzSetup(f *testing.F) {
	good := setupMsg{ringOff: page, ringCap: 1 << 12, collOff: 4 * page}
	f.Add(good.encode(), uint32(4*page+collAreaSize), true)
	f.Add(good.encode(), uint32(4*page), true)
	f.Add(setupMsg{ringOff: page, ringCap: 1 << 12}.encode(), uint32(3*page), false)
	f.Add(setupMsg{ringOff: 1<<64 - page, ringCap: 1 << 62}.encode(), uint32(3*page), false)
	f.Add([]byte("CSM1"), uint32(page), false)
	f.Fuzz(func(t *testing.T, data []byte, segLen uint32, allLocal bool) {
		m, err := parseSetup(data)
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("parseSetup: %v does not match ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(m.encode(), data) {
			t.Fatalf("setup %x re-encodes to %x", data, m.encode())
		}
		mine := setupMsg{ringOff: page, ringCap: 1 << 12}
		if allLocal {
			mine.collOff = 4 * page
		}
		n := int(segLen % (1 << 20)) // a bound on what one input allocates
		if err := m.check(mine, n); err != nil {
			if !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrMismatch) {
				t.Fatalf("check: %v matches neither ErrCorrupt nor ErrMismatch", err)
			}
			return
		}
		if m.ringOff < page || m.ringOff+uint64(shmem.RingBytes(int(m.ringCap))+shmem.ClaimsBytes) > uint64(n) {
			t.Fatalf("check passed a ring and its claims at %d of capacity %d in a segment of %d", m.ringOff, m.ringCap, n)
		}
		words := make([]uint64, (n+7)/8) // 8-byte aligned, as a mapping is page aligned
		pm := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), n)
		if _, err := shmem.AttachRing(pm[m.ringOff:]); err == nil {
			t.Fatal("attached a ring the peer never formatted")
		}
		if allLocal {
			if m.collOff%page != 0 || m.collOff+collAreaSize > uint64(n) {
				t.Fatalf("check passed a collective area at %d in a segment of %d", m.collOff, n)
			}
			a := newArea(pm[m.collOff : m.collOff+collAreaSize])
			if a.seq.Load() != 0 {
				t.Fatal("a fresh area's sequence word is not zero")
			}
		}
	})
}

// FuzzRecord decodes arbitrary ring records, as a local peer commits
// them: decoding never panics and fails with engine.ErrFrame; a record
// that decodes has exactly its frame's length, re-encodes to the same
// bytes (but the check word, which a ring leaves unread), and its payload
// reads out in full, and no further.
func FuzzRecord(f *testing.F) {
	rec := func(h engine.Header, payload []byte) []byte {
		b := make([]byte, recordLen(&h, len(payload)))
		encode(b, &h, payload, len(payload)%2 == 0)
		return b
	}
	f.Add(rec(engine.Header{Kind: engine.KindEager, Type: backend.Float32, Tag: 3, Count: 2}, make([]byte, 8)), int64(1<<12))
	f.Add(rec(engine.Header{Kind: engine.KindRTS, Type: backend.Uint8, Flags: engine.RTSPull, Count: 1 << 20, SID: 1, Addr: 0x7f0000001000}, nil), int64(1<<12))
	f.Add(rec(engine.Header{Kind: engine.KindData, Flags: engine.DataStream, Count: 64, SID: 1}, make([]byte, 64)), int64(1<<12))
	f.Add(rec(engine.Header{Kind: engine.KindCTS, SID: 5}, nil), int64(0))
	var help [helpSize]byte
	(&helpReq{dst: 0x7f0000100000, n: 1 << 20, chunk: 256 << 10, gen: 3}).encode(&help)
	f.Add(rec(engine.Header{Kind: engine.KindCTS, Flags: engine.CTSHelp, SID: 5}, help[:]), int64(0))
	f.Add(rec(engine.Header{Kind: engine.KindEager, Type: backend.Uint8, Tag: 1, Count: 5000}, bytes.Repeat([]byte{7, 1, 9}, 5000/3+1)[:5000]), int64(1<<16))
	f.Add([]byte{engine.KindEager}, int64(8))
	f.Fuzz(func(t *testing.T, data []byte, eager int64) {
		var h engine.Header
		var r record
		err := decode(data, eager, &h, &r)
		if err != nil {
			if !errors.Is(err, engine.ErrFrame) {
				t.Fatalf("decode: %v does not match engine.ErrFrame", err)
			}
			return
		}
		if n := recordLen(&h, len(r.b)); n != len(data) {
			t.Fatalf("a record of %d bytes decodes to a frame of %d", len(data), n)
		}
		if h.Kind == engine.KindCTS && h.Flags&engine.CTSHelp != 0 {
			// The link takes the request up: it is whole, or a frame error.
			q, err := decodeHelp(r.b)
			if err != nil && !errors.Is(err, engine.ErrFrame) {
				t.Fatalf("decodeHelp: %v does not match engine.ErrFrame", err)
			}
			if err == nil && (q.chunks() < 1 || q.chunks() > shmem.MaxClaims) {
				t.Fatalf("a CTSHelp of %d chunks", q.chunks())
			}
		}
		out := make([]byte, len(data))
		encodeAt(out, &h, r.b, true, r.sent)
		if !bytes.Equal(out[:engine.CheckOffset], data[:engine.CheckOffset]) || !bytes.Equal(out[engine.HeaderSize:], data[engine.HeaderSize:]) {
			t.Fatalf("record %x re-encodes to %x", data, out)
		}
		n := len(r.b)
		if err := r.Discard(n + 1); !errors.Is(err, engine.ErrFrame) {
			t.Fatalf("skipping past a payload of %d bytes: %v", n, err)
		}
		dst := make([]byte, n)
		if err := r.ReadFull(dst); err != nil {
			t.Fatalf("reading a payload of %d bytes: %v", n, err)
		}
		if !bytes.Equal(dst, data[len(data)-n:]) {
			t.Fatal("the payload read out is not the record's")
		}
		if err := r.ReadFull(make([]byte, 1)); !errors.Is(err, engine.ErrFrame) {
			t.Fatalf("reading past the payload: %v", err)
		}
	})
}

// FuzzCollDesc describes arbitrary descriptor words, as a peer stores them
// in its collective area: a peer's word that differs from this rank's is
// ErrMismatch naming the rank, never a panic, whatever its fields.
func FuzzCollDesc(f *testing.F) {
	f.Add(collDesc(&backend.Coll{Kind: backend.Allreduce, Op: backend.Sum, Send: backend.Buffer{Count: 4, Type: backend.Float64}}), uint64(0))
	f.Add(collDesc(&backend.Coll{Kind: backend.Bcast, Root: 3, Send: backend.Buffer{Count: 1 << 20, Type: backend.Uint8}}), ^uint64(0))
	f.Fuzz(func(t *testing.T, theirs, mine uint64) {
		err := collMismatch(5, theirs, mine)
		if !errors.Is(err, backend.ErrMismatch) {
			t.Fatalf("collMismatch: %v does not match ErrMismatch", err)
		}
		if !bytes.Contains([]byte(err.Error()), []byte("rank 5 called ")) {
			t.Fatalf("collMismatch does not name the rank: %v", err)
		}
	})
}
