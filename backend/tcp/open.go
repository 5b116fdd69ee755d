// Package tcp is courier's host transport: one TCP connection per pair of
// ranks, MPI matching (posted and unexpected queues, wildcards,
// non-overtaking), an eager protocol for small messages and a rendezvous for
// large ones. The frames are specified in PROTOCOL.md beside this file.
//
// It is registered as "tcp"; programs reach it through package mp
// (COURIER_BACKEND=tcp), not directly. New, which takes ready connections,
// is for tests and for transports layered on other streams.
package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/auth"
	"github.com/courier-mp/courier/internal/netaddr"
)

func init() { backend.Register("tcp", Driver{}) }

// Driver opens TCP communicators.
type Driver struct{}

// DefaultLinger bounds how long Close waits for peers to acknowledge the
// end of the connection before it closes it anyway.
const DefaultLinger = 2 * time.Second

// Open implements backend.Driver: it listens (on COURIER_IFACE when set),
// publishes its address through cfg.Exchange, and connects to every other
// rank; the lower rank of each pair accepts and the higher one dials.
func (Driver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	job := cfg.Job
	if job.Size < 1 || job.Rank < 0 || job.Rank >= job.Size {
		return nil, fmt.Errorf("%w: rank %d of %d", backend.ErrInvalid, job.Rank, job.Size)
	}
	if job.Size == 1 {
		return New(ctx, Options{Rank: 0, Size: 1, Check: cfg.Check})
	}
	host, err := listenHost(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: listen on %s: %w", host, err)
	}
	defer ln.Close()
	if dl, ok := ctx.Deadline(); ok {
		ln.(*net.TCPListener).SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	addrs, err := cfg.Exchange.AllGather(ctx, []byte(ln.Addr().String()))
	if err != nil {
		return nil, fmt.Errorf("tcp: exchanging addresses: %w", err)
	}
	if len(addrs) != job.Size {
		return nil, fmt.Errorf("tcp: exchange returned %d addresses for %d ranks", len(addrs), job.Size)
	}
	conns := make([]net.Conn, job.Size)
	hs := handshake{key: job.Key, rank: job.Rank, size: job.Size}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	record := func(rank int, nc net.Conn, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		if conns[rank] != nil {
			nc.Close()
			errs = append(errs, fmt.Errorf("tcp: rank %d connected twice", rank))
			return
		}
		conns[rank] = nc
	}
	for j := 0; j < job.Rank; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := dialPeer(ctx, string(addrs[j]), hs, j)
			record(j, nc, err)
		}()
	}
	for range job.Size - 1 - job.Rank {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			record(0, nil, fmt.Errorf("tcp: waiting for higher ranks to connect: %w", err))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rank, err := hs.accept(ctx, nc)
			if err != nil {
				nc.Close()
				record(0, nil, err)
				return
			}
			record(rank, nc, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
		return nil, err
	}
	return New(ctx, Options{Rank: job.Rank, Size: job.Size, Check: cfg.Check, Conns: conns})
}

// Options configures New.
type Options struct {
	Rank, Size int
	// Check turns on the strict checks of COURIER_CHECK=1.
	Check bool
	// Conns holds one connection per other rank (nil at Rank), already
	// authenticated. The communicator owns them from now on.
	Conns []net.Conn
	// Linger bounds Close's wait for peers (default DefaultLinger).
	Linger time.Duration
}

// New makes a communicator over ready connections. It is what Open uses
// after connecting; tests use it over net.Pipe.
func New(_ context.Context, o Options) (backend.Conn, error) {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return nil, fmt.Errorf("%w: rank %d of %d", backend.ErrInvalid, o.Rank, o.Size)
	}
	if o.Size > 1 && len(o.Conns) != o.Size {
		return nil, fmt.Errorf("%w: %d connections for %d ranks", backend.ErrInvalid, len(o.Conns), o.Size)
	}
	c := newConn(o.Rank, o.Size, o.Check)
	c.linger = o.Linger
	if c.linger <= 0 {
		c.linger = DefaultLinger
	}
	for j, nc := range o.Conns {
		if j == o.Rank {
			continue
		}
		if nc == nil {
			return nil, fmt.Errorf("%w: no connection to rank %d", backend.ErrInvalid, j)
		}
		tuneConn(nc)
		c.peers[j] = newPeer(c, j, nc)
	}
	for _, p := range c.peers {
		if p != nil {
			p.start()
		}
	}
	return c, nil
}

// tuneConn sets keep-alive probes so a peer whose host vanished without
// closing the connection is noticed within seconds.
func tuneConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: time.Second, Count: 3})
	}
}

// listenHost picks the address to listen on: COURIER_IFACE (an interface
// name or an IP address) when set; loopback when the rendezvous is on
// loopback; else the address this host uses to reach rank 0.
func listenHost(cfg backend.Config) (string, error) {
	if iface := strings.TrimSpace(cfg.Getenv("COURIER_IFACE")); iface != "" {
		return ifaceAddr(iface)
	}
	addr := cfg.Job.Addr
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "127.0.0.1", nil
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return host, nil
	}
	if ip != nil && cfg.Job.Rank == 0 && !ip.IsUnspecified() {
		return host, nil
	}
	// The local address of a route to rank 0 (no packet is sent).
	u, err := net.Dial("udp", addr)
	if err != nil {
		return "", fmt.Errorf("tcp: no route to rank 0 at %s (set COURIER_IFACE): %w", addr, err)
	}
	defer u.Close()
	return u.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// ifaceAddr resolves COURIER_IFACE (see netaddr.Resolve).
func ifaceAddr(iface string) (string, error) {
	host, err := netaddr.Resolve(iface)
	if err != nil {
		return "", fmt.Errorf("%w: %w", backend.ErrInvalid, err)
	}
	return host, nil
}

// Close implements backend.Conn: pending operations end with ErrClosed,
// each peer is sent BYE, and Close waits (up to the linger time) for the
// peers to finish the connection before closing it and joining the
// goroutines.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		c.failAll(backend.ErrClosed)
		for _, p := range c.peers {
			if p == nil {
				continue
			}
			// The writer sends BYE after what it already has queued.
			p.nc.SetDeadline(time.Now().Add(c.linger))
			p.push(job{bye: true})
		}
		done := make(chan struct{})
		go func() { c.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(c.linger + time.Second):
		}
		for _, p := range c.peers {
			if p != nil {
				p.stop()
				p.nc.Close()
			}
		}
		<-done
	})
	return c.closeErr
}

// The handshake on a new peer connection (PROTOCOL.md, "Handshake"): the
// acceptor challenges, the dialer proves it holds the job key and says its
// rank, the acceptor proves the same back.
const (
	hsMagic   = "CRR1"
	hsVersion = 1
	hsContext = "courier-tcp-peer"
	hsOK      = 0
	hsRefused = 1
	// hsMaxText bounds a refusal's text.
	hsMaxText = 1024
)

type handshake struct {
	key        string
	rank, size int
}

func ranksBytes(rank, size int) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(rank))
	binary.LittleEndian.PutUint32(b[4:], uint32(size))
	return b[:]
}

// errHandshake marks a refused or malformed handshake.
var errHandshake = errors.New("handshake failed")

func dialPeer(ctx context.Context, addr string, hs handshake, want int) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: connecting to rank %d at %s: %w", want, addr, err)
	}
	if err := hs.dial(ctx, nc, want); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// helloSize is the acceptor's first message: magic, version, nonce.
const helloSize = 4 + 2 + auth.NonceSize

// claimSize is the dialer's reply: magic, version, rank, size, nonce, proof.
const claimSize = 4 + 2 + 8 + auth.NonceSize + auth.MACSize

// dial runs the dialer's side; want is the rank expected at the other end.
func (hs handshake) dial(ctx context.Context, nc net.Conn, want int) error {
	defer deadline(ctx, nc)()
	var hello [helloSize]byte
	if _, err := io.ReadFull(nc, hello[:]); err != nil {
		return fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	nonce, err := parseHello(hello[:])
	if err != nil {
		return fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	mine := auth.Nonce()
	claim := make([]byte, 0, claimSize)
	claim = append(claim, hsMagic...)
	claim = binary.LittleEndian.AppendUint16(claim, hsVersion)
	claim = append(claim, ranksBytes(hs.rank, hs.size)...)
	claim = append(claim, mine[:]...)
	proof := auth.Prove(hs.key, hsContext, nonce, ranksBytes(hs.rank, hs.size))
	claim = append(claim, proof[:]...)
	if _, err := nc.Write(claim); err != nil {
		return fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	var status [1]byte
	if _, err := io.ReadFull(nc, status[:]); err != nil {
		return fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	if status[0] != hsOK {
		return fmt.Errorf("tcp: rank %d refused this rank: %w", want, readRefusal(nc))
	}
	var reply [4 + auth.MACSize]byte
	if _, err := io.ReadFull(nc, reply[:]); err != nil {
		return fmt.Errorf("tcp: handshake with rank %d: %w", want, err)
	}
	got := int(binary.LittleEndian.Uint32(reply[:4]))
	if got != want || !auth.Verify(hs.key, hsContext, mine, reply[4:], ranksBytes(got, hs.size)) {
		return fmt.Errorf("tcp: the process at rank %d's address is not rank %d of this job: %w", want, want, errHandshake)
	}
	return nil
}

// accept runs the acceptor's side and returns the dialer's rank.
func (hs handshake) accept(ctx context.Context, nc net.Conn) (int, error) {
	defer deadline(ctx, nc)()
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
	c, err := parseClaim(claim[:])
	if err != nil {
		return -1, fmt.Errorf("tcp: handshake with %s: %w", nc.RemoteAddr(), err)
	}
	refuse := func(why string) (int, error) {
		msg := []byte(why)[:min(len(why), hsMaxText)]
		out := append([]byte{hsRefused}, binary.LittleEndian.AppendUint16(nil, uint16(len(msg)))...)
		nc.Write(append(out, msg...))
		return -1, fmt.Errorf("tcp: refused a connection from %s: %s: %w", nc.RemoteAddr(), why, errHandshake)
	}
	if !auth.Verify(hs.key, hsContext, nonce, c.proof[:], ranksBytes(c.rank, c.size)) {
		return refuse("connection from another job: job key mismatch")
	}
	if c.size != hs.size {
		return refuse(fmt.Sprintf("size mismatch: rank %d has %d ranks, the dialer says %d", hs.rank, hs.size, c.size))
	}
	if c.rank <= hs.rank || c.rank >= hs.size {
		return refuse(fmt.Sprintf("rank %d may not dial rank %d", c.rank, hs.rank))
	}
	proof := auth.Prove(hs.key, hsContext, c.nonce, ranksBytes(hs.rank, hs.size))
	reply := append([]byte{hsOK}, binary.LittleEndian.AppendUint32(nil, uint32(hs.rank))...)
	if _, err := nc.Write(append(reply, proof[:]...)); err != nil {
		return -1, fmt.Errorf("tcp: handshake with rank %d: %w", c.rank, err)
	}
	return c.rank, nil
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

func parseHello(b []byte) ([auth.NonceSize]byte, error) {
	var nonce [auth.NonceSize]byte
	if len(b) < helloSize || string(b[:4]) != hsMagic {
		return nonce, fmt.Errorf("%w: not a courier peer", errHandshake)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != hsVersion {
		return nonce, fmt.Errorf("%w: protocol version %d, want %d", errHandshake, v, hsVersion)
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
		return c, fmt.Errorf("%w: protocol version %d, want %d", errHandshake, v, hsVersion)
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
