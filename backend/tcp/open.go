package tcp

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	"github.com/courier-mp/courier/internal/netaddr"
)

func init() {
	backend.Register("tcp", Driver{})
	backend.Register("host", Driver{Host: true})
}

// Driver opens host communicators. The zero Driver (registered as "tcp")
// joins every pair of ranks over TCP. With Host (registered as "host"),
// ranks of one host use shared memory and TCP joins the hosts, unless
// COURIER_TRANSPORTS says otherwise.
type Driver struct {
	// Host lets ranks of one host meet through shared memory.
	Host bool
}

// DefaultLinger bounds how long Close waits for peers to acknowledge the
// end of the connection before it closes it anyway.
const DefaultLinger = engine.DefaultLinger

// ErrPeerClosed is backend.ErrPeerClosed, the same value: part of the
// ErrPeerLost error of operations with a rank that closed its
// communicator in order.
//
// Deprecated: use backend.ErrPeerClosed, which every transport shares.
var ErrPeerClosed = backend.ErrPeerClosed

// Open implements backend.Driver: it listens (on COURIER_IFACE when set),
// publishes its address through cfg.Exchange, and connects to every other
// rank over TCP; the lower rank of each pair accepts and the higher one
// dials. The "host" driver also meets the ranks of this host over a unix
// socket and joins them through shared memory.
func (d Driver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	rank, size := cfg.Job.Rank, cfg.Job.Size
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", backend.ErrInvalid, rank, size)
	}
	tr, err := d.transports(cfg)
	if err != nil {
		return nil, err
	}
	if tr.userTimeout, err = userTimeout(cfg); err != nil {
		return nil, err
	}
	if size == 1 {
		return New(ctx, Options{Rank: 0, Size: 1, Check: cfg.Check})
	}
	return connect(ctx, cfg, tr)
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
	// UserTimeout bounds how long data sent on a connection may stay
	// unacknowledged, and how long an idle connection may go unanswered,
	// before the link counts as lost (TCP_USER_TIMEOUT, on Linux; see
	// DefaultUserTimeout). 0: DefaultUserTimeout; negative: none (the
	// kernel's own limit, some 15 minutes).
	UserTimeout time.Duration

	// For measurements (bench_test.go): the links' eager limit (0:
	// engine.EagerLimit) and socket buffer sizes (0: the kernel's
	// autotuning).
	eager   int64
	sockBuf int
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
	e, err := engine.New(engine.Options{Rank: o.Rank, Size: o.Size, Check: o.Check, Linger: o.Linger})
	if err != nil {
		return nil, err
	}
	links := make([]*link, 0, len(o.Conns))
	for j, nc := range o.Conns {
		if j == o.Rank {
			continue
		}
		if nc == nil {
			return nil, fmt.Errorf("%w: no connection to rank %d", backend.ErrInvalid, j)
		}
		ut := o.UserTimeout
		if ut == 0 {
			ut = DefaultUserTimeout
		}
		tuneConn(nc, ut)
		if tc, ok := nc.(*net.TCPConn); ok && o.sockBuf > 0 {
			tc.SetReadBuffer(o.sockBuf)
			tc.SetWriteBuffer(o.sockBuf)
		}
		l := newLink(e, nc)
		if o.eager > 0 {
			l.eager = min(o.eager, engine.EagerLimit)
		}
		l.p = e.Attach(j, l)
		links = append(links, l)
	}
	if pl := newPoller(links); pl != nil {
		e.AddPoller(pl)
	}
	for _, l := range links {
		l.start()
	}
	return e, nil
}

// DefaultUserTimeout bounds, by default, how long a TCP link may go with
// data unacknowledged, or idle with its keep-alive probes unanswered,
// before it counts as lost (TCP_USER_TIMEOUT, on Linux): after a network
// partition, both ranks of the link end what they wait for on it within
// about this long. COURIER_TCP_USER_TIMEOUT (a duration, e.g. 30s; 0 for
// none) sets another bound. Elsewhere the setting is ignored: an idle link
// is still noticed by its keep-alive probes within seconds, but one with
// data in flight only when the kernel stops retransmitting.
//
// Under this bound a peer that stops reading altogether for longer (a
// process stopped in a debugger, say) loses its links too: the sender's
// data stays unacknowledged behind a closed window.
const DefaultUserTimeout = 10 * time.Second

// UserTimeoutEnv names the setting of the TCP user timeout.
const UserTimeoutEnv = "COURIER_TCP_USER_TIMEOUT"

// userTimeout reads UserTimeoutEnv: DefaultUserTimeout when unset, -1 for
// 0 (no bound).
func userTimeout(cfg backend.Config) (time.Duration, error) {
	v := strings.TrimSpace(cfg.Getenv(UserTimeoutEnv))
	if v == "" {
		return DefaultUserTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	switch {
	case err != nil || d < 0:
		return 0, fmt.Errorf("%w: %s=%q: want a duration such as 10s, or 0 for none", backend.ErrInvalid, UserTimeoutEnv, v)
	case d == 0:
		return -1, nil
	case d < time.Millisecond:
		return time.Millisecond, nil
	}
	return d, nil
}

// tuneConn sets keep-alive probes so a peer whose host vanished without
// closing the connection is noticed within seconds, and the user timeout
// ut (if positive; see DefaultUserTimeout) so a partition is noticed
// within ut also while data is in flight.
func tuneConn(nc net.Conn, ut time.Duration) {
	if sc, ok := nc.(*sealedConn); ok {
		nc = sc.Conn
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: time.Second, Count: 3})
		if ut > 0 {
			setUserTimeout(tc, ut)
		}
		unpace(tc)
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
