package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/auth"
)

// scriptConn is a connection whose peer says fixed bytes and takes
// whatever it is sent: a handshake's other side, for fuzzing, with no
// goroutine behind it.
type scriptConn struct {
	r    *bytes.Reader
	sent bytes.Buffer
}

func (c *scriptConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)      { return c.sent.Write(p) }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// handshakeError reports whether err is what a failed handshake may end
// with: a refusal or malformed message (errHandshake), the peer closing
// before its hello (errBusy), or the peer's bytes running out.
func handshakeError(err error) bool {
	return errors.Is(err, errHandshake) || errors.Is(err, errBusy) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// helloBytes is an acceptor's hello of protocol version v.
func helloBytes(v uint16, nonce [auth.NonceSize]byte) []byte {
	b := append([]byte(hsMagic), binary.LittleEndian.AppendUint16(nil, v)...)
	return append(b, nonce[:]...)
}

// claimBytes is a dialer's claim of protocol version v.
func claimBytes(v uint16, c claim) []byte {
	b := append([]byte(hsMagic), binary.LittleEndian.AppendUint16(nil, v)...)
	b = append(b, ranksBytes(c.rank, c.size)...)
	b = append(b, c.nonce[:]...)
	return append(b, c.proof[:]...)
}

// FuzzHandshakeDial plays the acceptor's side of the handshake with
// arbitrary bytes: the dialer never panics, never reads a refusal longer
// than its bound, and never takes the bytes for rank 0 of its job (the
// acceptor's proof answers a nonce the dialer drew after the bytes were
// fixed); every failure is a handshake error. A hello or a claim that
// parses encodes back to the same bytes.
func FuzzHandshakeDial(f *testing.F) {
	var nonce [auth.NonceSize]byte
	ok := append([]byte{hsOK}, binary.LittleEndian.AppendUint32(nil, 0)...)
	ok = append(ok, make([]byte, auth.MACSize)...)
	refusal := append([]byte{hsRefused}, binary.LittleEndian.AppendUint16(nil, 5)...)
	f.Add(append(helloBytes(hsVersion, nonce), ok...))
	f.Add(append(helloBytes(hsVersion, nonce), append(refusal, "nope!"...)...))
	f.Add(append(helloBytes(hsVersion, nonce), hsRefused, 0xff, 0xff))
	f.Add(helloBytes(1, nonce))
	f.Add(claimBytes(hsVersion, claim{rank: 1, size: 2}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if n, err := parseHello(data); err == nil {
			var v uint16
			if len(data) >= 6 {
				v = binary.LittleEndian.Uint16(data[4:])
			}
			if !bytes.Equal(helloBytes(v, n), data[:helloSize]) {
				t.Fatalf("hello %x re-encodes to other bytes", data[:helloSize])
			}
		} else if !errors.Is(err, errHandshake) {
			t.Fatalf("parseHello: %v is not a handshake error", err)
		}
		if c, err := parseClaim(data); err == nil {
			if !bytes.Equal(claimBytes(hsVersion, c), data[:claimSize]) {
				t.Fatalf("claim %x re-encodes to other bytes", data[:claimSize])
			}
		} else if !errors.Is(err, errHandshake) {
			t.Fatalf("parseClaim: %v is not a handshake error", err)
		}
		if err := readRefusal(bytes.NewReader(data)); !errors.Is(err, errHandshake) {
			t.Fatalf("readRefusal: %v is not a handshake error", err)
		} else if len(err.Error()) > 4*hsMaxText+len(errHandshake.Error())+8 {
			t.Fatalf("a refusal of %d bytes passed its bound of %d", len(err.Error()), hsMaxText)
		}

		hs := handshake{key: "key", rank: 1, size: 4}
		nc := &scriptConn{r: bytes.NewReader(data)}
		_, err := hs.dial(context.Background(), nc, 0)
		if err == nil {
			t.Fatal("the dialer took forged bytes for rank 0 of its job")
		}
		if !handshakeError(err) {
			t.Fatalf("dial: %v is not a handshake error", err)
		}
		if nc.sent.Len() != 0 && nc.sent.Len() != claimSize {
			t.Fatalf("the dialer sent %d bytes, want nothing or a claim of %d", nc.sent.Len(), claimSize)
		}
	})
}

// FuzzHandshakeAccept plays the dialer's side of the handshake with
// arbitrary bytes: the acceptor never panics, never admits the bytes as a
// rank (nor asks whether the rank may connect: that comes after the proof,
// which answers a nonce drawn after the bytes were fixed), writes nothing
// but its hello and at most one bounded refusal, and fails with a
// handshake error.
func FuzzHandshakeAccept(f *testing.F) {
	f.Add(claimBytes(hsVersion, claim{rank: 1, size: 2}))
	f.Add(claimBytes(hsVersion, claim{rank: 3, size: 4}))
	f.Add(claimBytes(1, claim{rank: 1, size: 2}))
	f.Add(claimBytes(hsVersion, claim{rank: 1 << 31, size: 1 << 31}))
	f.Add([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		hs := handshake{key: "key", rank: 0, size: 4}
		nc := &scriptConn{r: bytes.NewReader(data)}
		admitted := false
		rank, _, err := hs.accept(context.Background(), nc, func(int) string { admitted = true; return "" }, func(int) {})
		if err == nil || rank != -1 {
			t.Fatalf("the acceptor admitted forged bytes as rank %d (%v)", rank, err)
		}
		if admitted {
			t.Fatal("the acceptor asked to admit a rank whose proof it had not checked")
		}
		if !handshakeError(err) {
			t.Fatalf("accept: %v is not a handshake error", err)
		}
		sent := nc.sent.Bytes()
		if len(sent) < helloSize || string(sent[:4]) != hsMagic {
			t.Fatalf("the acceptor's first bytes %x are not its hello", sent)
		}
		if rest := sent[helloSize:]; len(rest) > 0 {
			if rest[0] != hsRefused || len(rest) < 3 || int(binary.LittleEndian.Uint16(rest[1:])) != len(rest)-3 || len(rest)-3 > hsMaxText {
				t.Fatalf("after its hello the acceptor sent %q, want one refusal", rest)
			}
			if !strings.Contains(err.Error(), string(rest[3:])) {
				t.Fatalf("the acceptor told the dialer %q but says %v", rest[3:], err)
			}
		}
	})
}
