package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// Frame kinds. PROTOCOL.md in this folder is the specification.
const (
	kindEager uint8 = 1 // a whole small message: header + payload
	kindRTS   uint8 = 2 // request to send a large message
	kindCTS   uint8 = 3 // clear to send: the receive is posted
	kindData  uint8 = 4 // a chunk of a large message's payload
	kindBye   uint8 = 5 // the sender closed its communicator
)

// CTS flags: the receiver refuses the message and no DATA follows.
const (
	ctsTruncate uint16 = 1 << 0 // the receive buffer is too small
	ctsMismatch uint16 = 1 << 1 // element type or count disagree (checks)
)

// BYE flags.
const byeAborted uint16 = 1 << 0 // the sender aborted rather than closed

// headerSize is the size of every frame header.
const headerSize = 32

// maxChunk is the largest DATA payload one frame carries.
const maxChunk = 4 << 20

// header is a decoded frame header. Field use depends on Kind:
//
//	Eager, RTS: Tag, Type, Count (elements), Seq; RTS also SID.
//	CTS:        SID (the sender's id), RID (the receiver's id), Flags.
//	Data:       RID, Offset (bytes), Length (bytes of this chunk).
//	Bye:        nothing.
type header struct {
	Kind  uint8
	Type  backend.DType
	Flags uint16
	Tag   int32
	Count int64  // Eager, RTS: elements; Data: chunk length in bytes
	Seq   uint64 // Eager, RTS: sequence number; CTS, Data: RID
	SID   uint64 // RTS, CTS: sender's id; Data: byte offset
}

func (h *header) encode(b *[headerSize]byte) {
	b[0] = h.Kind
	b[1] = uint8(h.Type)
	binary.LittleEndian.PutUint16(b[2:], h.Flags)
	binary.LittleEndian.PutUint32(b[4:], uint32(h.Tag))
	binary.LittleEndian.PutUint64(b[8:], uint64(h.Count))
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.SID)
}

// errFrame is a malformed frame: the connection cannot be trusted after it.
var errFrame = errors.New("malformed frame")

// decodeHeader parses and validates a frame header.
func decodeHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("%w: %d bytes, want %d", errFrame, len(b), headerSize)
	}
	h := header{
		Kind:  b[0],
		Type:  backend.DType(b[1]),
		Flags: binary.LittleEndian.Uint16(b[2:]),
		Tag:   int32(binary.LittleEndian.Uint32(b[4:])),
		Count: int64(binary.LittleEndian.Uint64(b[8:])),
		Seq:   binary.LittleEndian.Uint64(b[16:]),
		SID:   binary.LittleEndian.Uint64(b[24:]),
	}
	switch h.Kind {
	case kindEager, kindRTS:
		if !h.Type.Valid() {
			return h, fmt.Errorf("%w: element type %d", errFrame, b[1])
		}
		if h.Count < 0 || h.Count > maxCount(h.Type) {
			return h, fmt.Errorf("%w: count %d", errFrame, h.Count)
		}
		if h.Kind == kindEager && h.Count*int64(h.Type.Size()) > eagerLimit {
			return h, fmt.Errorf("%w: eager payload of %d bytes over the limit %d", errFrame, h.Count*int64(h.Type.Size()), eagerLimit)
		}
	case kindCTS:
	case kindData:
		if h.Count <= 0 || h.Count > maxChunk {
			return h, fmt.Errorf("%w: data chunk of %d bytes", errFrame, h.Count)
		}
		if int64(h.SID) < 0 || int64(h.SID)+h.Count < 0 {
			return h, fmt.Errorf("%w: data offset %d", errFrame, h.SID)
		}
	case kindBye:
	default:
		return h, fmt.Errorf("%w: kind %d", errFrame, h.Kind)
	}
	return h, nil
}

// maxCount is the largest element count whose byte size fits an int64.
func maxCount(t backend.DType) int64 { return (1<<63 - 1) / int64(t.Size()) }
