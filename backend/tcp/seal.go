package tcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/auth"
)

// Sealed connections (COURIER_ENCRYPT=1): for networks that are not
// trusted, every byte a TCP link writes after the handshake goes in
// records sealed with AES-256-GCM, a key for each direction of each
// connection, derived (HKDF-SHA256) from the job key and the two nonces
// of that connection's handshake. A record is its ciphertext's length (4
// bytes, big-endian, also the record's additional data) and the
// ciphertext with its 16-byte tag; its nonce is the record's number on
// that direction of the connection, which both sides count, so a record
// replayed, dropped, reordered or altered fails its tag. The frames
// inside are the protocol's as they are (PROTOCOL.md). Both ends must
// agree: the setting is bound into the handshake's proofs, and a rank
// whose peer differs is refused with a message that says so. The
// shared-memory transport, within one host, is not sealed.

// SealEnv names the variable that seals TCP links ("1") or not ("0", the
// default).
const SealEnv = "COURIER_ENCRYPT"

// parseSeal reads SealEnv's value.
func parseSeal(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "off", "false", "no":
		return false, nil
	case "1", "on", "true", "yes":
		return true, nil
	}
	return false, fmt.Errorf("%w: %s=%q: want 1 (seal the TCP links) or 0", backend.ErrInvalid, SealEnv, v)
}

// session is what a handshake leaves both sides knowing: the acceptor's
// nonce and the dialer's.
type session struct {
	acc, dial [auth.NonceSize]byte
}

// sealRecord bounds a record's plaintext: a DATA chunk (up to 4 MiB) is
// sealed in several.
const sealRecord = 256 << 10

// sealTag is the size of GCM's tag.
const sealTag = 16

// sealedConn is a TCP connection whose bytes go in sealed records.
type sealedConn struct {
	net.Conn
	wmu    sync.Mutex
	w      cipher.AEAD
	wseq   uint64
	wnonce [12]byte
	wbuf   []byte
	r      cipher.AEAD
	rseq   uint64
	rnonce [12]byte
	rlen   [4]byte
	rbuf   []byte // the record being opened
	plain  []byte // what was opened and not read yet (in rbuf)
	rerr   error  // the error that ended reading
}

// newSealedConn seals nc, one end of a connection whose handshake left
// s, with keys from key; dialer says which end this is.
func newSealedConn(nc net.Conn, key string, s session, dialer bool) (*sealedConn, error) {
	toAcc, err := sealAEAD(key, s, "dialer to acceptor")
	if err != nil {
		return nil, err
	}
	toDial, err := sealAEAD(key, s, "acceptor to dialer")
	if err != nil {
		return nil, err
	}
	c := &sealedConn{Conn: nc, w: toAcc, r: toDial}
	if !dialer {
		c.w, c.r = toDial, toAcc
	}
	return c, nil
}

// sealAEAD derives one direction's key and makes its AEAD.
func sealAEAD(key string, s session, dir string) (cipher.AEAD, error) {
	salt := append(s.acc[:], s.dial[:]...)
	k, err := hkdf.Key(sha256.New, []byte(key), salt, "courier tcp seal 1: "+dir, 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// nonce is record n's nonce, in dst (the connection's own array: a
// local would escape to the heap through the AEAD's interface).
func nonce(dst *[12]byte, n uint64) []byte {
	binary.BigEndian.PutUint64(dst[4:], n)
	return dst[:]
}

// Write seals p, in records of at most sealRecord bytes, and writes them.
func (c *sealedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.seal(p, nil); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writev writes a and b, sealed: in one record when they fit (a frame's
// header and its payload), as the plain link writes them in one call.
func (c *sealedConn) writev(a, b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.seal(a, b)
}

// seal writes a then b as sealed records; under wmu.
func (c *sealedConn) seal(a, b []byte) error {
	for len(a)+len(b) > 0 {
		take := min(len(a)+len(b), sealRecord)
		need := 4 + take + sealTag
		if cap(c.wbuf) < need {
			c.wbuf = make([]byte, need, max(need, 4+sealRecord+sealTag))
		}
		rec := c.wbuf[:4]
		binary.BigEndian.PutUint32(rec, uint32(take+sealTag))
		ka := min(len(a), take)
		rec = append(rec, a[:ka]...)
		rec = append(rec, b[:take-ka]...)
		a, b = a[ka:], b[take-ka:]
		rec = c.w.Seal(rec[:4], nonce(&c.wnonce, c.wseq), rec[4:], rec[:4])
		c.wseq++
		if _, err := c.Conn.Write(rec); err != nil {
			return err
		}
	}
	return nil
}

// Read returns what was opened, opening the next record when nothing is
// left: a record that fails its tag ends the connection with an error
// matching backend.ErrCorrupt.
func (c *sealedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(c.plain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		c.rerr = c.open()
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	return n, nil
}

// open reads and opens the next record into plain.
func (c *sealedConn) open() error {
	if _, err := io.ReadFull(c.Conn, c.rlen[:]); err != nil {
		return err
	}
	l := int(binary.BigEndian.Uint32(c.rlen[:]))
	if l < sealTag || l > sealRecord+sealTag {
		return fmt.Errorf("%w: a sealed record of %d bytes: the byte stream was altered in transit", backend.ErrCorrupt, l)
	}
	if cap(c.rbuf) < l {
		c.rbuf = make([]byte, 0, max(l, sealRecord+sealTag))
	}
	body := c.rbuf[:l]
	if _, err := io.ReadFull(c.Conn, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	plain, err := c.r.Open(body[:0], nonce(&c.rnonce, c.rseq), body, c.rlen[:])
	if err != nil {
		return fmt.Errorf("%w: sealed record %d fails its authentication: the byte stream was altered in transit, or replayed", backend.ErrCorrupt, c.rseq)
	}
	c.rseq++
	c.plain = plain
	return nil
}

// CloseWrite shuts down the writing side, as the plain connection's.
func (c *sealedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// sealName says a seal setting for the handshake's refusals.
func sealName(on bool) string {
	return SealEnv + "=" + strconv.Itoa(map[bool]int{false: 0, true: 1}[on])
}
