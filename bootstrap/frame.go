package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/courier-mp/courier/internal/auth"
)

// The wire format of the rendezvous; PROTOCOL.md describes it.

// MaxBlob is the largest contribution to AllGather: 1 MiB.
const MaxBlob = 1 << 20

// ErrTooLarge reports a blob over MaxBlob, whether given to AllGather or
// announced by a peer's frame header (which is refused before anything is
// allocated).
var ErrTooLarge = errors.New("bootstrap: blob larger than 1 MiB")

// errProtocol reports bytes that are not the rendezvous protocol.
var errProtocol = errors.New("bootstrap: rendezvous protocol violation")

// Frame types.
const (
	frameHello byte = 'H' // rank 0 → rank: magic, version, nonce
	frameAuth  byte = 'A' // rank → rank 0: rank, size, proof, nonce
	frameOK    byte = 'K' // rank 0 → rank: proof
	frameError byte = 'E' // rank 0 → rank: code, text
	frameBlob  byte = 'B' // both ways: one rank's contribution
)

// Codes of error frames.
const (
	codeRefused byte = 1 // the job or this connection is refused: ErrRefused
	codeLost    byte = 2 // a rank is gone: ErrPeerLost
)

const (
	magic           = "CRDV"
	protocolVersion = 1
	headerLen       = 5 // type, uint32 payload length
	helloLen        = len(magic) + 1 + auth.NonceSize
	authLen         = 4 + 4 + auth.MACSize + auth.NonceSize
	okLen           = auth.MACSize
	maxErrorText    = 1024
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
		if n > MaxBlob {
			return fmt.Errorf("%w: a frame announces %d bytes", ErrTooLarge, n)
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
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	typ, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	if err := checkHeader(typ, n); err != nil {
		return 0, nil, err
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

// writeFrame writes one frame, header and payload in one write.
func writeFrame(w io.Writer, typ byte, payload []byte) error {
	var h [headerLen]byte
	putHeader(h[:], typ, len(payload))
	bufs := net.Buffers{h[:], payload}
	_, err := bufs.WriteTo(w)
	return err
}

// writeBlobs writes one blob frame per entry of blobs, in one write.
func writeBlobs(w io.Writer, blobs [][]byte) error {
	hdrs := make([]byte, headerLen*len(blobs))
	bufs := make(net.Buffers, 0, 2*len(blobs))
	for i, b := range blobs {
		h := hdrs[i*headerLen : (i+1)*headerLen]
		putHeader(h, frameBlob, len(b))
		bufs = append(bufs, h, b)
	}
	_, err := bufs.WriteTo(w)
	return err
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
