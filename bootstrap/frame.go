package bootstrap

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/courier-mp/courier/internal/auth"
	"github.com/courier-mp/courier/internal/errs"
)

// The wire format of the rendezvous; PROTOCOL.md describes it.

// MaxBlob is the largest contribution to AllGather: 1 MiB.
const MaxBlob = 1 << 20

// ErrTooLarge reports a blob over MaxBlob, whether given to AllGather or
// announced by a peer's frame header (which is refused before anything is
// allocated). It matches errs.ErrInvalid (mp.ErrInvalid).
var ErrTooLarge = sentinel("bootstrap: blob larger than 1 MiB", errs.ErrInvalid)

// errProtocol reports bytes that are not the rendezvous protocol.
var errProtocol = errors.New("bootstrap: rendezvous protocol violation")

// Frame types.
const (
	frameHello byte = 'H' // rank 0 → rank: magic, version, nonce
	frameAuth  byte = 'A' // rank → rank 0: rank, size, proof, nonce
	frameOK    byte = 'K' // rank 0 → rank: proof
	frameError byte = 'E' // rank 0 → rank: code, text
	frameBlob  byte = 'B' // both ways: one rank's contribution, after its MAC
)

// Codes of error frames.
const (
	codeRefused byte = 1 // the job or this connection is refused: ErrRefused
	codeLost    byte = 2 // a rank is gone: ErrPeerLost
)

const (
	magic           = "CRDV"
	protocolVersion = 2
	headerLen       = 5 // type, uint32 payload length
	helloLen        = len(magic) + 1 + auth.NonceSize
	authLen         = 4 + 4 + auth.MACSize + auth.NonceSize
	okLen           = auth.MACSize + auth.NonceSize
	maxErrorText    = 1024
	// maxBlobFrame is the largest blob frame's payload: a MAC, then the
	// blob.
	maxBlobFrame = auth.MACSize + MaxBlob
)

// checkBlob refuses a contribution of n bytes over MaxBlob.
func checkBlob(n int) error {
	if n > MaxBlob {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	return nil
}

// checkHeader checks a frame's announced payload length against its type,
// before the payload is read.
func checkHeader(typ byte, n uint32) error {
	want := -1
	switch typ {
	case frameHello:
		want = helloLen
	case frameAuth:
		want = authLen
	case frameOK:
		want = okLen
	case frameError:
		if n < 1 || n > 1+maxErrorText {
			return fmt.Errorf("%w: error frame of %d bytes", errProtocol, n)
		}
	case frameBlob:
		if n > maxBlobFrame {
			return fmt.Errorf("%w: a frame announces %d bytes", ErrTooLarge, n)
		}
		if n < auth.MACSize {
			return fmt.Errorf("%w: blob frame of %d bytes, shorter than its MAC", errProtocol, n)
		}
	default:
		return fmt.Errorf("%w: unknown frame type 0x%02x", errProtocol, typ)
	}
	if want >= 0 && n != uint32(want) {
		return fmt.Errorf("%w: frame %q of %d bytes, want %d", errProtocol, typ, n, want)
	}
	return nil
}

// readFrame reads one frame. It returns io.EOF when r ends cleanly before
// a frame, and io.ErrUnexpectedEOF when it ends inside one. The length is
// checked before the payload is allocated.
func readFrame(r io.Reader) (typ byte, payload []byte, err error) {
	return readFrameOf(r, "")
}

// readFrameOf is readFrame for a reader that expects one of the frame
// types in types ("": any): a frame of another type is refused from its
// header, before its payload is allocated, so a peer that has not proved
// it knows the key cannot make rank 0 allocate a blob's megabyte.
func readFrameOf(r io.Reader, types string) (typ byte, payload []byte, err error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	typ, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	if err := checkHeader(typ, n); err != nil {
		return 0, nil, err
	}
	if types != "" && strings.IndexByte(types, typ) < 0 {
		return 0, nil, fmt.Errorf("%w: frame %q where %q was due", errProtocol, typ, types)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return typ, payload, nil
}

// putHeader writes a frame header into h.
func putHeader(h []byte, typ byte, n int) {
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:headerLen], uint32(n))
}

// writeFrame writes one frame, header and payload (the concatenation of
// parts) in one write.
func writeFrame(w io.Writer, typ byte, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var h [headerLen]byte
	putHeader(h[:], typ, n)
	bufs := append(net.Buffers{h[:]}, parts...)
	_, err := bufs.WriteTo(w)
	return err
}

// writeBlobs writes one blob frame per entry of blobs, each after its
// MAC, in one write.
func writeBlobs(w io.Writer, blobs [][]byte, macs [][auth.MACSize]byte) error {
	hdrs := make([]byte, headerLen*len(blobs))
	bufs := make(net.Buffers, 0, 3*len(blobs))
	for i, b := range blobs {
		h := hdrs[i*headerLen : (i+1)*headerLen]
		putHeader(h, frameBlob, auth.MACSize+len(b))
		bufs = append(bufs, h, macs[i][:], b)
	}
	_, err := bufs.WriteTo(w)
	return err
}

// blobContext is the context of a blob's MAC.
const blobContext = "courier-rendezvous-blob"

// blobMAC binds one rank's contribution to this rendezvous and round:
// HMAC-SHA256 keyed with the job key over the context, the session nonce
// rank 0 handed out when it admitted the ranks, the owner's rank, the
// size, the round's number, and the blob. A relay that rewrites a blob, or
// replays one from another round or another rendezvous of the same key,
// is found out.
func blobMAC(key string, session [auth.NonceSize]byte, owner, size int, round uint64, blob []byte) [auth.MACSize]byte {
	var facts [16]byte
	binary.BigEndian.PutUint32(facts[0:], uint32(owner))
	binary.BigEndian.PutUint32(facts[4:], uint32(size))
	binary.BigEndian.PutUint64(facts[8:], round)
	return auth.Prove(key, blobContext, session, facts[:], blob)
}

// openBlob checks a blob frame's MAC and returns the blob.
func openBlob(key string, session [auth.NonceSize]byte, owner, size int, round uint64, p []byte) ([]byte, bool) {
	if len(p) < auth.MACSize {
		return nil, false
	}
	mac, blob := p[:auth.MACSize], p[auth.MACSize:]
	want := blobMAC(key, session, owner, size, round, blob)
	return blob, hmac.Equal(mac, want[:])
}

// helloPayload is rank 0's greeting: magic, version, challenge.
func helloPayload(nonce [auth.NonceSize]byte) []byte {
	p := make([]byte, 0, helloLen)
	p = append(p, magic...)
	p = append(p, protocolVersion)
	return append(p, nonce[:]...)
}

// parseHello returns the challenge of a hello frame.
func parseHello(p []byte) (nonce [auth.NonceSize]byte, err error) {
	if len(p) != helloLen || string(p[:len(magic)]) != magic {
		return nonce, fmt.Errorf("%w: not a courier rendezvous", errProtocol)
	}
	if v := p[len(magic)]; v != protocolVersion {
		return nonce, fmt.Errorf("%w: rendezvous protocol version %d, this is version %d", errProtocol, v, protocolVersion)
	}
	copy(nonce[:], p[len(magic)+1:])
	return nonce, nil
}

// authMsg is a rank's answer to the challenge.
type authMsg struct {
	rank, size uint32
	proof      [auth.MACSize]byte   // auth.Prove(key, proveContext, challenge, rankSize)
	nonce      [auth.NonceSize]byte // the rank's challenge to rank 0
}

func (m *authMsg) marshal() []byte {
	p := make([]byte, 8, authLen)
	binary.BigEndian.PutUint32(p[0:], m.rank)
	binary.BigEndian.PutUint32(p[4:], m.size)
	p = append(p, m.proof[:]...)
	return append(p, m.nonce[:]...)
}

func parseAuth(p []byte) (authMsg, error) {
	var m authMsg
	if len(p) != authLen {
		return m, fmt.Errorf("%w: auth frame of %d bytes", errProtocol, len(p))
	}
	m.rank = binary.BigEndian.Uint32(p[0:])
	m.size = binary.BigEndian.Uint32(p[4:])
	copy(m.proof[:], p[8:])
	copy(m.nonce[:], p[8+auth.MACSize:])
	return m, nil
}

// rankSize encodes the facts a proof is bound to.
func rankSize(rank, size uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b[0:], rank)
	binary.BigEndian.PutUint32(b[4:], size)
	return b
}

// errorPayload encodes an error frame; the text is made printable and cut
// to maxErrorText bytes.
func errorPayload(code byte, text string) []byte {
	text = printable(text)
	if len(text) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return append([]byte{code}, text...)
}

// parseError decodes an error frame. A peer's text must be printable
// UTF-8, since it ends up in an error message.
func parseError(p []byte) (code byte, text string, err error) {
	if len(p) < 1 || len(p) > 1+maxErrorText {
		return 0, "", fmt.Errorf("%w: error frame of %d bytes", errProtocol, len(p))
	}
	code, text = p[0], string(p[1:])
	if code != codeRefused && code != codeLost {
		return 0, "", fmt.Errorf("%w: unknown error code %d", errProtocol, code)
	}
	if printable(text) != text {
		return 0, "", fmt.Errorf("%w: error text is not printable UTF-8", errProtocol)
	}
	return code, text, nil
}

// printable replaces what is not printable UTF-8 in s.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}
