package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/auth"
)

// frameBytes encodes one frame.
func frameBytes(typ byte, payload []byte) []byte {
	var b bytes.Buffer
	writeFrame(&b, typ, payload)
	return b.Bytes()
}

// header encodes a frame header announcing n bytes.
func header(typ byte, n uint32) []byte {
	h := make([]byte, headerLen)
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], n)
	return h
}

func sampleAuth() authMsg {
	m := authMsg{rank: 3, size: 4, nonce: auth.Nonce()}
	m.proof = auth.Prove("key", proveContext, auth.Nonce(), rankSize(3, 4))
	return m
}

func TestFrameRoundTrip(t *testing.T) {
	nonce := auth.Nonce()
	m := sampleAuth()
	var stream bytes.Buffer
	writeFrame(&stream, frameHello, helloPayload(nonce))
	writeFrame(&stream, frameAuth, m.marshal())
	writeFrame(&stream, frameOK, m.proof[:], m.nonce[:])
	writeFrame(&stream, frameError, errorPayload(codeLost, "rank 3: EOF"))
	blobs := [][]byte{[]byte("a"), {}, bytes.Repeat([]byte{7}, MaxBlob)}
	macs := make([][auth.MACSize]byte, len(blobs))
	for i, b := range blobs {
		macs[i] = blobMAC("k", nonce, i, 3, 9, b)
	}
	writeBlobs(&stream, blobs, macs)

	typ, p, err := readFrame(&stream)
	if err != nil || typ != frameHello {
		t.Fatalf("hello: %q, %v", typ, err)
	}
	if got, err := parseHello(p); err != nil || got != nonce {
		t.Errorf("parseHello = %x, %v; want %x", got, err, nonce)
	}
	typ, p, err = readFrame(&stream)
	if err != nil || typ != frameAuth {
		t.Fatalf("auth: %q, %v", typ, err)
	}
	if got, err := parseAuth(p); err != nil || got != m {
		t.Errorf("parseAuth = %+v, %v; want %+v", got, err, m)
	}
	typ, p, err = readFrame(&stream)
	if err != nil || typ != frameOK || !bytes.Equal(p, append(m.proof[:], m.nonce[:]...)) {
		t.Errorf("ok: %q, %x, %v", typ, p, err)
	}
	typ, p, err = readFrame(&stream)
	if err != nil || typ != frameError {
		t.Fatalf("error: %q, %v", typ, err)
	}
	if code, text, err := parseError(p); err != nil || code != codeLost || text != "rank 3: EOF" {
		t.Errorf("parseError = %d, %q, %v", code, text, err)
	}
	for i, want := range []int{1, 0, MaxBlob} {
		typ, p, err = readFrame(&stream)
		if err != nil || typ != frameBlob {
			t.Fatalf("blob: %q, %v", typ, err)
		}
		blob, ok := openBlob("k", nonce, i, 3, 9, p)
		if !ok || len(blob) != want || blob == nil {
			t.Errorf("blob %d: %d bytes (nil: %t), MAC good: %t; want %d", i, len(blob), blob == nil, ok, want)
		}
		if _, ok := openBlob("k", nonce, i, 3, 10, p); ok {
			t.Errorf("blob %d passes as one of another round", i)
		}
	}
	if _, _, err := readFrame(&stream); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"unknown type", append(header('G', 3), "ET "...), errProtocol},
		{"short hello", header(frameHello, uint32(helloLen-1)), errProtocol},
		{"long auth", header(frameAuth, uint32(authLen+1)), errProtocol},
		{"short ok", header(frameOK, 1), errProtocol},
		{"empty error", header(frameError, 0), errProtocol},
		{"long error", header(frameError, uint32(2+maxErrorText)), errProtocol},
		{"blob over 1 MiB", header(frameBlob, uint32(maxBlobFrame+1)), ErrTooLarge},
		{"blob without its MAC", header(frameBlob, auth.MACSize-1), errProtocol},
		{"blob of 4 GiB", header(frameBlob, 1<<32-1), ErrTooLarge},
		{"cut header", header(frameBlob, 3)[:3], io.ErrUnexpectedEOF},
		{"cut payload", append(header(frameBlob, 33), 'x'), io.ErrUnexpectedEOF},
		{"empty", nil, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readFrame(bytes.NewReader(tt.in))
			if !errors.Is(err, tt.want) {
				t.Errorf("readFrame error %v, want %v", err, tt.want)
			}
		})
	}
}

// TestHugeAnnouncedLength checks that a header announcing 4 GiB is refused
// before anything is allocated, from a connection that sends nothing more.
func TestHugeAnnouncedLength(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go a.Write(header(frameBlob, 1<<32-1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := readFrame(b)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("readFrame error %v, want ErrTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing the frame allocated %d bytes", grew)
	}
}

func TestParseErrors(t *testing.T) {
	nonce := auth.Nonce()
	hello := helloPayload(nonce)
	wrongMagic := bytes.Clone(hello)
	wrongMagic[0] = 'X'
	wrongVersion := bytes.Clone(hello)
	wrongVersion[len(magic)] = 1
	if _, err := parseHello(wrongMagic); !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), "not a courier rendezvous") {
		t.Errorf("wrong magic: %v", err)
	}
	if _, err := parseHello(wrongVersion); !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), "version 1") {
		t.Errorf("wrong version: %v", err)
	}
	if _, err := parseAuth(make([]byte, authLen-1)); !errors.Is(err, errProtocol) {
		t.Errorf("short auth: %v", err)
	}
	for name, p := range map[string][]byte{
		"unknown code":   append([]byte{9}, "x"...),
		"control char":   append([]byte{codeLost}, "a\x1b[2Jb"...),
		"invalid utf-8":  append([]byte{codeLost}, 0xff, 0xfe),
		"empty":          {},
		"too long":       append([]byte{codeLost}, strings.Repeat("x", maxErrorText+1)...),
		"newline inside": append([]byte{codeRefused}, "a\nb"...),
	} {
		if _, _, err := parseError(p); !errors.Is(err, errProtocol) {
			t.Errorf("parseError(%s) = %v, want errProtocol", name, err)
		}
	}
}

func TestErrorPayload(t *testing.T) {
	long := strings.Repeat("é", maxErrorText) // 2 bytes each
	p := errorPayload(codeLost, "bad\x00text\n"+long)
	code, text, err := parseError(p)
	if err != nil || code != codeLost {
		t.Fatalf("parseError(errorPayload(...)) = %d, %v", code, err)
	}
	if !strings.HasPrefix(text, "bad?text?é") || len(text) > maxErrorText {
		t.Errorf("text = %q (%d bytes)", text[:20], len(text))
	}
}

// fakeConn is a net.Conn that reads from r and discards what is written.
type fakeConn struct {
	net.Conn
	r io.Reader
}

func (c fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c fakeConn) Close() error                     { return nil }
func (c fakeConn) SetDeadline(time.Time) error      { return nil }
func (c fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (c fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// FuzzFrame feeds arbitrary bytes to the frame decoder, to each message's
// parser, and to both sides of the handshake and of a round. Nothing may
// panic or allocate beyond the limits; what decodes must re-encode to the
// same bytes; and no handshake may succeed, since no proof can be forged.
func FuzzFrame(f *testing.F) {
	m := sampleAuth()
	f.Add(frameBytes(frameHello, helloPayload(auth.Nonce())))
	f.Add(append(frameBytes(frameHello, helloPayload(auth.Nonce())), frameBytes(frameOK, append(m.proof[:], m.nonce[:]...))...))
	f.Add(frameBytes(frameAuth, m.marshal()))
	f.Add(frameBytes(frameOK, append(m.proof[:], m.nonce[:]...)))
	f.Add(frameBytes(frameError, errorPayload(codeRefused, "connection from another job: job key mismatch")))
	f.Add(append(frameBytes(frameHello, helloPayload(auth.Nonce())),
		frameBytes(frameError, errorPayload(codeRefused, "rank 2 joined twice"))...))
	f.Add(append(frameBytes(frameBlob, append(make([]byte, auth.MACSize), "addr=10.0.0.1:4000"...)), frameBytes(frameBlob, make([]byte, auth.MACSize))...))
	f.Add(header(frameBlob, 1<<32-1))
	f.Add(header(frameError, 3))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			off := len(data) - r.Len()
			typ, p, err := readFrame(r)
			if err != nil {
				break
			}
			if enc := frameBytes(typ, p); !bytes.Equal(enc, data[off:off+len(enc)]) {
				t.Fatalf("frame %q re-encodes to other bytes", typ)
			}
			switch typ {
			case frameHello:
				if n, err := parseHello(p); err == nil && !bytes.Equal(helloPayload(n), p) {
					t.Fatal("hello re-encodes to other bytes")
				}
			case frameAuth:
				m, err := parseAuth(p)
				if err != nil || !bytes.Equal(m.marshal(), p) {
					t.Fatalf("auth: %v, or re-encodes to other bytes", err)
				}
			case frameError:
				if code, text, err := parseError(p); err == nil && !bytes.Equal(errorPayload(code, text), p) {
					t.Fatal("error frame re-encodes to other bytes")
				}
			case frameBlob:
				if len(p) > maxBlobFrame {
					t.Fatalf("blob of %d bytes", len(p))
				}
			}
		}

		s := &server{key: "key", size: 4, conns: make([]net.Conn, 4)}
		if _, err := s.challenge(fakeConn{r: bytes.NewReader(data)}); err == nil {
			t.Fatal("rank 0 admitted a forged proof")
		}
		c := &client{conn: fakeConn{r: bytes.NewReader(data)}, rank: 1, size: 4, addr: "fuzz"}
		if err := c.handshake("key"); err == nil {
			t.Fatal("a rank accepted rank 0's forged proof")
		}
		c.conn = fakeConn{r: bytes.NewReader(data)}
		c.key = "key"
		if _, err := c.round([]byte("x")); err == nil {
			t.Fatal("a rank took blobs whose MACs no one could compute")
		}
		s = &server{key: "key", size: 2, conns: []net.Conn{nil, fakeConn{r: bytes.NewReader(data)}}}
		if _, _, lost := s.gather(0, []byte("x")); lost == nil {
			t.Fatal("rank 0 took a blob whose MAC no one could compute")
		}
	})
}
