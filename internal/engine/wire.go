package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/courier-mp/courier/backend"
)

// Frame kinds: the engine's protocol, which every link carries. The TCP
// link writes them as specified in backend/tcp/PROTOCOL.md; the
// shared-memory link puts the same header in a ring record.
const (
	KindEager uint8 = 1 // a whole small message: header + payload
	KindRTS   uint8 = 2 // request to send a large message
	KindCTS   uint8 = 3 // clear to send (or, with CTSDone, the receiver has pulled it)
	KindData  uint8 = 4 // a chunk of a large message's payload
	KindBye   uint8 = 5 // the sender closed its communicator (the world: the link ends)
	KindLeave uint8 = 6 // the sender closed (or aborted, or revoked) one communicator; the link goes on
	KindAsk   uint8 = 7 // a rank whose wait timed out asks for the receiver's pending operations (ask.go)
	KindReply uint8 = 8 // the answer to KindAsk: header + the report's bytes
)

// CTS flags. With CTSTruncate or CTSMismatch the receiver refuses the
// message and no DATA follows; CTSDone says the receiver copied the whole
// payload out of the sender's memory itself (a pulled rendezvous), so the
// send is complete.
const (
	CTSTruncate uint16 = 1 << 0 // the receive buffer is too small
	CTSMismatch uint16 = 1 << 1 // element type or count disagree (checks)
	CTSDone     uint16 = 1 << 2 // pulled: the send is complete
	// CTSHelp is a link's own CTS, which the engine never sees: the
	// receiver is pulling the message (SID) and asks its sender to copy
	// part of it into the receiver's memory meanwhile (the shared-memory
	// link's split copy; the link at the sender takes it up with
	// Peer.PulledSend). CTSDone still ends the send.
	CTSHelp uint16 = 1 << 3
)

// RTSPull marks an RTS whose Addr the receiver may read itself (a link
// that implements Puller); it answers with CTSDone, or with a plain CTS
// when it cannot read it after all.
const RTSPull uint16 = 1 << 0

// DataStream marks the DATA of a large message (links choose the size):
// the receiver may copy it out with non-temporal stores, since its buffer
// will not be in cache when it is read. It changes nothing else.
const DataStream uint16 = 1 << 0

// ByeAborted is the flag of BYE and LEAVE: the sender aborted rather than
// closed.
const ByeAborted uint16 = 1 << 0

// HeaderSize is the size of every frame header on the wire: 36 bytes of
// fields and, at CheckOffset, a check word over them.
const HeaderSize = 40

// CheckOffset is where the header's check word lies: CRC32-C (Castagnoli)
// of the bytes before it. The TCP link writes it (Seal) and verifies it
// (Verify); the shared-memory ring leaves it zero (Encode's), since its
// records never leave this host's memory and are written by a process of
// the same user.
const CheckOffset = 36

// MaxChunk is the largest DATA payload one frame carries.
const MaxChunk = 4 << 20

// EagerLimit is the largest message a link may send eagerly (whole,
// without waiting for the receive); a link may choose a smaller one.
const EagerLimit = 1 << EagerLog

// EagerLog is log2(EagerLimit): 64 KiB.
const EagerLog = 16

// Header is a decoded frame header. Field use depends on Kind:
//
//	Eager, RTS: Comm, Tag, Type, Count (elements), Seq; RTS also SID (and
//	            Addr with RTSPull, carried only by links that pull).
//	CTS:        SID (the sender's id), Seq (the receiver's id), Flags.
//	Data:       Seq (the receiver's id), SID (byte offset), Count (bytes).
//	Bye:        Flags.
//	Leave:      Comm (0, the world, only with LeaveRevoke), Flags; with
//	            LeaveRevoke, Tag: the rank of the job the sender lost (-1: none).
//	Ask:        Seq (numbered as EAGER and RTS), SID (the question's id).
//	Reply:      Seq, SID (the question's id), Count (the report's bytes).
type Header struct {
	Kind  uint8
	Type  backend.DType
	Flags uint16
	Tag   int32
	Count int64  // Eager, RTS: elements; Data: chunk length in bytes
	Seq   uint64 // Eager, RTS: sequence number; CTS, Data: receiver's id
	SID   uint64 // RTS, CTS: sender's id; Data: byte offset
	Comm  uint32 // Eager, RTS, Leave: the communicator's id (0: the world)
	Addr  uint64 // RTS with RTSPull: the payload's address in the sender
}

// Encode writes the header's wire bytes (Addr is not among them), with a
// zero check word.
func (h *Header) Encode(b *[HeaderSize]byte) {
	b[0] = h.Kind
	b[1] = uint8(h.Type)
	binary.LittleEndian.PutUint16(b[2:], h.Flags)
	binary.LittleEndian.PutUint32(b[4:], uint32(h.Tag))
	binary.LittleEndian.PutUint64(b[8:], uint64(h.Count))
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.SID)
	binary.LittleEndian.PutUint32(b[32:], h.Comm)
	binary.LittleEndian.PutUint32(b[CheckOffset:], 0)
}

// castagnoli is CRC32-C's table (hardware-assisted on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Seal writes the check word of an encoded header: CRC32-C of its bytes
// before CheckOffset.
func Seal(b *[HeaderSize]byte) {
	binary.LittleEndian.PutUint32(b[CheckOffset:], crc32.Checksum(b[:CheckOffset], castagnoli))
}

// Verify checks the check word of a sealed header (b holds at least
// HeaderSize bytes): a mismatch is an error matching backend.ErrCorrupt.
func Verify(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrFrame, len(b), HeaderSize)
	}
	want := binary.LittleEndian.Uint32(b[CheckOffset:])
	if got := crc32.Checksum(b[:CheckOffset], castagnoli); got != want {
		return fmt.Errorf("%w: a frame header fails its check (CRC32-C %08x, the header says %08x): the byte stream was altered in transit",
			backend.ErrCorrupt, got, want)
	}
	return nil
}

// ErrFrame is a malformed frame: the link cannot be trusted after it.
var ErrFrame = errors.New("malformed frame")

// DecodeHeader parses and validates a frame header; eager bounds an EAGER
// frame's payload.
func DecodeHeader(b []byte, eager int64) (Header, error) {
	var h Header
	err := h.Decode(b, eager)
	return h, err
}

// Decode is DecodeHeader into h, which it overwrites (Addr included): a
// path that keeps its header in place copies none.
func (h *Header) Decode(b []byte, eager int64) error {
	if len(b) < HeaderSize {
		*h = Header{}
		return fmt.Errorf("%w: %d bytes, want %d", ErrFrame, len(b), HeaderSize)
	}
	b = b[:HeaderSize]
	*h = Header{
		Kind:  b[0],
		Type:  backend.DType(b[1]),
		Flags: binary.LittleEndian.Uint16(b[2:]),
		Tag:   int32(binary.LittleEndian.Uint32(b[4:])),
		Count: int64(binary.LittleEndian.Uint64(b[8:])),
		Seq:   binary.LittleEndian.Uint64(b[16:]),
		SID:   binary.LittleEndian.Uint64(b[24:]),
		Comm:  binary.LittleEndian.Uint32(b[32:]),
	}
	return h.Check(eager)
}

// Check validates a header's fields for its kind.
func (h *Header) Check(eager int64) error {
	switch h.Kind {
	case KindEager, KindRTS:
		if !h.Type.Valid() {
			return fmt.Errorf("%w: element type %d", ErrFrame, uint8(h.Type))
		}
		if h.Count < 0 || h.Count > maxCount(h.Type) {
			return fmt.Errorf("%w: count %d", ErrFrame, h.Count)
		}
		if h.Kind == KindEager && h.Count*int64(h.Type.Size()) > eager {
			return fmt.Errorf("%w: eager payload of %d bytes over the limit %d", ErrFrame, h.Count*int64(h.Type.Size()), eager)
		}
	case KindCTS:
	case KindData:
		if h.Count <= 0 || h.Count > MaxChunk {
			return fmt.Errorf("%w: data chunk of %d bytes", ErrFrame, h.Count)
		}
		if int64(h.SID) < 0 || int64(h.SID)+h.Count < 0 {
			return fmt.Errorf("%w: data offset %d", ErrFrame, h.SID)
		}
	case KindBye:
	case KindAsk:
		if h.Count != 0 {
			return fmt.Errorf("%w: ASK with %d payload bytes", ErrFrame, h.Count)
		}
	case KindReply:
		if h.Count < 0 || h.Count > eager {
			return fmt.Errorf("%w: REPLY of %d bytes over the limit %d", ErrFrame, h.Count, eager)
		}
	case KindLeave:
		if h.Comm == 0 && h.Flags&LeaveRevoke == 0 {
			return fmt.Errorf("%w: LEAVE of communicator 0 (the world says BYE)", ErrFrame)
		}
	default:
		return fmt.Errorf("%w: kind %d", ErrFrame, h.Kind)
	}
	return nil
}

// PayloadLen is the number of payload bytes that follow the header on the
// wire: an EAGER message's bytes, a DATA chunk or a REPLY's report.
func (h *Header) PayloadLen() int64 {
	switch h.Kind {
	case KindEager:
		return h.Count * int64(h.Type.Size())
	case KindData, KindReply:
		return h.Count
	}
	return 0
}

// maxCount is the largest element count whose byte size fits an int64.
// Element sizes are powers of two, so it is a shift (a division is the
// slowest step of a header's check).
func maxCount(t backend.DType) int64 {
	sz := uint64(t.Size())
	if sz&(sz-1) == 0 {
		return math.MaxInt64 >> bits.TrailingZeros64(sz)
	}
	return math.MaxInt64 / int64(sz)
}
