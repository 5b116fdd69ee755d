package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/courier-mp/courier/internal/auth"
)

// The handshake on a new peer connection (PROTOCOL.md, "Handshake"): the
// acceptor challenges, the dialer proves it holds the job key and says its
// rank, the acceptor proves the same back.
//
// Version 2 frames carry a communicator id and a header check word (40-byte
// headers); a peer that speaks another version is refused, with the
// reason, before any frame moves.
const (
	hsMagic   = "CRR1"
	hsVersion = 2
	hsContext = "courier-tcp-peer"
	hsOK      = 0
	hsRefused = 1
	// hsMaxText bounds a refusal's text.
	hsMaxText = 1024
)

type handshake struct {
	key        string
	rank, size int
	seal       bool // COURIER_ENCRYPT: bound into the proofs (seal.go)
}

// hsSealed is the proofs' context on connections that are sealed: the
// setting is authenticated with the ranks, and a peer whose setting
// differs is told so (mismatch).
const hsSealed = "courier-tcp-peer-sealed"

// context is the proofs' context for hs's seal setting; other, the other
// setting's.
func (hs handshake) context() string {
	if hs.seal {
		return hsSealed
	}
	return hsContext
}

func (hs handshake) other() string {
	if hs.seal {
		return hsContext
	}
	return hsSealed
}

// sealMismatch says why a peer whose proof holds under the other seal
// setting is refused.
func (hs handshake) sealMismatch(peer string) string {
	return fmt.Sprintf("%s has %s and rank %d has %s: set %s alike on every rank",
		peer, sealName(!hs.seal), hs.rank, sealName(hs.seal), SealEnv)
}

func ranksBytes(rank, size int) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(rank))
	binary.LittleEndian.PutUint32(b[4:], uint32(size))
	return b[:]
}

// errHandshake marks a refused or malformed handshake.
var errHandshake = errors.New("handshake failed")

// errBusy marks a connection the acceptor closed before its hello: it
// was running as many handshakes as it takes at once (strangers among
// them, perhaps), so the dialer tries again.
var errBusy = errors.New("the peer closed the connection before its hello")

// dialPeer connects to rank want at addr and runs the dialer's side of
// the handshake. A connection the acceptor drops before its hello is
// dialed again, with a growing pause, until ctx ends.
func dialPeer(ctx context.Context, network, addr string, hs handshake, want int) (net.Conn, error) {
	var d net.Dialer
	pause := 10 * time.Millisecond
	for {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, fmt.Errorf("tcp: connecting to rank %d at %s: %w", want, addr, err)
		}
		var s session
		s, err = hs.dial(ctx, nc, want)
		if err == nil {
			return hs.sealConn(nc, s, true)
		}
		nc.Close()
		if !errors.Is(err, errBusy) || ctx.Err() != nil {
			return nil, err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// helloSize is the acceptor's first message: magic, version, nonce.
const helloSize = 4 + 2 + auth.NonceSize

// claimSize is the dialer's reply: magic, version, rank, size, nonce, proof.
const claimSize = 4 + 2 + 8 + auth.NonceSize + auth.MACSize

// dial runs the dialer's side; want is the rank expected at the other end.
func (hs handshake) dial(ctx context.Context, nc net.Conn, want int) (s session, err error) {
	defer deadline(ctx, nc)()
	var hello [helloSize]byte
	if _, err := io.ReadFull(nc, hello[:]); err != nil {
		if err == io.EOF {
			err = errBusy
		}
		return s, fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	nonce, err := parseHello(hello[:])
	if err != nil {
		return s, fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	mine := auth.Nonce()
	s = session{acc: nonce, dial: mine}
	claim := make([]byte, 0, claimSize)
	claim = append(claim, hsMagic...)
	claim = binary.LittleEndian.AppendUint16(claim, hsVersion)
	claim = append(claim, ranksBytes(hs.rank, hs.size)...)
	claim = append(claim, mine[:]...)
	proof := auth.Prove(hs.key, hs.context(), nonce, ranksBytes(hs.rank, hs.size))
	claim = append(claim, proof[:]...)
	if _, err := nc.Write(claim); err != nil {
		return s, fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	var status [1]byte
	if _, err := io.ReadFull(nc, status[:]); err != nil {
		return s, fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	if status[0] != hsOK {
		return s, fmt.Errorf("tcp: rank %d refused this rank: %w", want, readRefusal(nc))
	}
	var reply [4 + auth.MACSize]byte
	if _, err := io.ReadFull(nc, reply[:]); err != nil {
		return s, fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	got := int(binary.LittleEndian.Uint32(reply[:4]))
	if got != want || !auth.Verify(hs.key, hs.context(), mine, reply[4:], ranksBytes(got, hs.size)) {
		return s, fmt.Errorf("tcp: the process at rank %d's address is not rank %d of this job: %w", want, want, errHandshake)
	}
	return s, nil
}

// accept runs the acceptor's side, within hsTimeout, and returns the
// dialer's rank. Once the dialer has proved it holds the key, admit says
// why its rank may not connect ("" when it may, which reserves the rank);
// release gives the rank back if the handshake fails after that.
func (hs handshake) accept(ctx context.Context, nc net.Conn, admit func(rank int) string, release func(rank int)) (int, session, error) {
	var s session
	j, err := hs.acceptSide(ctx, nc, admit, release, &s)
	return j, s, err
}

// acceptSide is accept's work; it fills s once the dialer has proved
// itself.
func (hs handshake) acceptSide(ctx context.Context, nc net.Conn, admit func(rank int) string, release func(rank int), s *session) (int, error) {
	hctx, cancel := context.WithTimeout(ctx, hsTimeout)
	defer cancel()
	defer deadline(hctx, nc)()
	nonce := auth.Nonce()
	hello := make([]byte, 0, helloSize)
	hello = append(hello, hsMagic...)
	hello = binary.LittleEndian.AppendUint16(hello, hsVersion)
	hello = append(hello, nonce[:]...)
	if _, err := nc.Write(hello); err != nil {
		return -1, fmt.Errorf("tcp: handshake with %s: %w", nc.RemoteAddr(), err)
	}
	var claim [claimSize]byte
	if _, err := io.ReadFull(nc, claim[:]); err != nil {
		return -1, fmt.Errorf("tcp: handshake with %s: %w", nc.RemoteAddr(), err)
	}
	refuse := func(why string) (int, error) {
		msg := []byte(why)[:min(len(why), hsMaxText)]
		out := append([]byte{hsRefused}, binary.LittleEndian.AppendUint16(nil, uint16(len(msg)))...)
		nc.Write(append(out, msg...))
		return -1, fmt.Errorf("tcp: refused a connection from %s: %s: %w", nc.RemoteAddr(), why, errHandshake)
	}
	c, err := parseClaim(claim[:])
	if errors.Is(err, errVersion) {
		return refuse(err.Error())
	}
	if err != nil {
		return -1, fmt.Errorf("tcp: handshake with %s: %w", nc.RemoteAddr(), err)
	}
	if !auth.Verify(hs.key, hs.context(), nonce, c.proof[:], ranksBytes(c.rank, c.size)) {
		if auth.Verify(hs.key, hs.other(), nonce, c.proof[:], ranksBytes(c.rank, c.size)) {
			return refuse(hs.sealMismatch(fmt.Sprintf("rank %d", c.rank)))
		}
		return refuse("connection from another job: job key mismatch")
	}
	if c.size != hs.size {
		return refuse(fmt.Sprintf("size mismatch: rank %d has %d ranks, the dialer says %d", hs.rank, hs.size, c.size))
	}
	if c.rank <= hs.rank || c.rank >= hs.size {
		return refuse(fmt.Sprintf("rank %d may not dial rank %d", c.rank, hs.rank))
	}
	if why := admit(c.rank); why != "" {
		return refuse(why)
	}
	proof := auth.Prove(hs.key, hs.context(), c.nonce, ranksBytes(hs.rank, hs.size))
	*s = session{acc: nonce, dial: c.nonce}
	reply := append([]byte{hsOK}, binary.LittleEndian.AppendUint32(nil, uint32(hs.rank))...)
	if _, err := nc.Write(append(reply, proof[:]...)); err != nil {
		release(c.rank)
		return -1, fmt.Errorf("tcp: handshake with rank %d: %w", c.rank, err)
	}
	return c.rank, nil
}

// sealConn returns nc as the link uses it: sealed when hs says so and nc
// is a TCP connection (the unix socket to a rank of this host carries
// only the shared-memory transport's setup).
func (hs handshake) sealConn(nc net.Conn, s session, dialer bool) (net.Conn, error) {
	if _, ok := nc.(*net.TCPConn); !ok || !hs.seal {
		return nc, nil
	}
	sc, err := newSealedConn(nc, hs.key, s, dialer)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return sc, nil
}

// deadline applies ctx's deadline to nc for the handshake and returns the
// function that lifts it.
func deadline(ctx context.Context, nc net.Conn) func() {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		nc.SetDeadline(time.Time{})
	}
}

// errVersion marks a peer that speaks another version of the protocol.
var errVersion = errors.New("protocol version mismatch")

// versionError is the error of a peer that speaks protocol version v.
func versionError(v uint16) error {
	return fmt.Errorf("%w: %w: the peer speaks courier's TCP protocol version %d, this rank version %d (every rank of a job must run the same courier release)",
		errHandshake, errVersion, v, hsVersion)
}

func parseHello(b []byte) ([auth.NonceSize]byte, error) {
	var nonce [auth.NonceSize]byte
	if len(b) < helloSize || string(b[:4]) != hsMagic {
		return nonce, fmt.Errorf("%w: not a courier peer", errHandshake)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != hsVersion {
		return nonce, versionError(v)
	}
	copy(nonce[:], b[6:])
	return nonce, nil
}

type claim struct {
	rank, size int
	nonce      [auth.NonceSize]byte
	proof      [auth.MACSize]byte
}

func parseClaim(b []byte) (claim, error) {
	var c claim
	if len(b) < claimSize || string(b[:4]) != hsMagic {
		return c, fmt.Errorf("%w: not a courier peer", errHandshake)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != hsVersion {
		return c, versionError(v)
	}
	r, s := binary.LittleEndian.Uint32(b[6:]), binary.LittleEndian.Uint32(b[10:])
	if r > 1<<30 || s > 1<<30 {
		return c, fmt.Errorf("%w: rank %d of %d", errHandshake, r, s)
	}
	c.rank, c.size = int(r), int(s)
	copy(c.nonce[:], b[14:])
	copy(c.proof[:], b[14+auth.NonceSize:])
	return c, nil
}

func readRefusal(r io.Reader) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("%w: %v", errHandshake, err)
	}
	l := min(int(binary.LittleEndian.Uint16(n[:])), hsMaxText)
	msg := make([]byte, l)
	if _, err := io.ReadFull(r, msg); err != nil {
		return fmt.Errorf("%w: %v", errHandshake, err)
	}
	return fmt.Errorf("%w: %s", errHandshake, strconv.QuoteToGraphic(string(msg)))
}
