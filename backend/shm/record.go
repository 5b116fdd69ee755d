package shm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// A ring record is one frame: the engine's 40-byte header, for a pulled RTS
// (engine.RTSPull) the sender's address of the payload and the wall clock's
// nanoseconds when the record was written (8 bytes each, little endian: the
// receiver's chooser times the message from there), then the payload of
// EAGER and DATA, or a CTSHelp's request (split.go). The record's length is
// its frame's length exactly; anything else is a corrupt ring. The header's
// check word (its last 4 bytes) is left zero and not read: a ring lies in
// memory of this host that only processes of the same user, which met over
// an authenticated socket, can map, and nothing on the way can alter it, so
// the CRC32-C that guards a TCP stream would cost every message for
// nothing.

// pullSize is what a pulled RTS carries after its header: the address and
// the time it was written.
const pullSize = 16

// recordLen is the length of h's record with a payload of n bytes.
func recordLen(h *engine.Header, n int) int {
	l := engine.HeaderSize + n
	if h.Kind == engine.KindRTS && h.Flags&engine.RTSPull != 0 {
		l += pullSize
	}
	return l
}

// encode writes h and payload into a record of recordLen bytes, a pulled
// RTS stamped now.
func encode(b []byte, h *engine.Header, payload []byte, stream bool) {
	var sent int64
	if h.Kind == engine.KindRTS && h.Flags&engine.RTSPull != 0 {
		sent = time.Now().UnixNano()
	}
	encodeAt(b, h, payload, stream, sent)
}

// encodeAt is encode with a pulled RTS stamped sent.
func encodeAt(b []byte, h *engine.Header, payload []byte, stream bool, sent int64) {
	h.Encode((*[engine.HeaderSize]byte)(b))
	off := engine.HeaderSize
	if h.Kind == engine.KindRTS && h.Flags&engine.RTSPull != 0 {
		binary.LittleEndian.PutUint64(b[off:], h.Addr)
		binary.LittleEndian.PutUint64(b[off+8:], uint64(sent))
		off += pullSize
	}
	if stream && len(payload) >= streamInFrom {
		shmem.CopyStream(b[off:], payload) // CopyInStream
		return
	}
	copy(b[off:], payload)
}

// decode parses a record into h, its header, and src, its payload as a
// Source.
func decode(b []byte, eager int64, h *engine.Header, src *record) error {
	*src = record{}
	if err := h.Decode(b, eager); err != nil {
		return err
	}
	off := engine.HeaderSize
	var sent int64
	if h.Kind == engine.KindRTS && h.Flags&engine.RTSPull != 0 {
		if len(b) < off+pullSize {
			return fmt.Errorf("%w: pulled RTS record of %d bytes", engine.ErrFrame, len(b))
		}
		h.Addr = binary.LittleEndian.Uint64(b[off:])
		sent = int64(binary.LittleEndian.Uint64(b[off+8:]))
		off += pullSize
	}
	want := h.PayloadLen()
	if h.Kind == engine.KindCTS && h.Flags&engine.CTSHelp != 0 {
		want = helpSize // the request, taken up by the link (split.go)
	}
	if int64(len(b)-off) != want {
		return fmt.Errorf("%w: record of %d bytes for a frame of kind %d with %d payload bytes", engine.ErrFrame, len(b), h.Kind, want)
	}
	*src = record{b: b[off:], stream: h.Kind == engine.KindData && h.Flags&engine.DataStream != 0, sent: sent}
	return nil
}

// record is the payload of the record being delivered, as an
// engine.Source.
type record struct {
	b      []byte
	stream bool  // a large message's chunk: copied out with non-temporal stores
	sent   int64 // a pulled RTS: the wall clock's nanoseconds when it was written
}

func (r *record) ReadFull(dst []byte) error {
	if len(dst) > len(r.b) {
		return fmt.Errorf("%w: payload of %d bytes read for %d", engine.ErrFrame, len(r.b), len(dst))
	}
	var n int
	if r.stream {
		n = shmem.CopyStream(dst, r.b)
	} else {
		n = copy(dst, r.b)
	}
	r.b = r.b[n:]
	return nil
}

// Take implements engine.MemorySource: a record's payload is in the ring.
func (r *record) Take(n int) ([]byte, bool) {
	if n > len(r.b) {
		return nil, false
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b, true
}

func (r *record) Discard(n int) error {
	if n > len(r.b) {
		return fmt.Errorf("%w: payload of %d bytes skipped for %d", engine.ErrFrame, len(r.b), n)
	}
	r.b = r.b[n:]
	return nil
}
