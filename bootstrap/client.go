package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/courier-mp/courier/internal/auth"
	"github.com/courier-mp/courier/internal/errs"
)

// Dial backoff while rank 0 is not listening yet.
const (
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// client is the side of the rendezvous of a rank other than 0: one
// connection to rank 0, kept open across rounds.
type client struct {
	conn       net.Conn
	rank, size int
	addr       string
	key        string
	session    [auth.NonceSize]byte // rank 0's nonce for this rendezvous (from its ok)
	rounds     uint64               // rounds begun; under mu

	closing atomic.Bool
	mu      sync.Mutex // held by AllGather and Close
	err     error      // once set, every AllGather returns it
}

// otherJob marks an error that says the rendezvous reached belongs to
// another job: it refused this rank's proof, or could not prove it knows
// the key. A rank that read rank 0's address from a file that may be stale
// tries again.
type otherJob struct{ err error }

func (e *otherJob) Error() string { return e.err.Error() }
func (e *otherJob) Unwrap() error { return e.err }

// busy marks a connection that rank 0 closed before it said hello: it
// was handshaking with as many connections as it takes at once (strangers
// among them), so the rank tries again.
type busy struct{ err error }

func (e *busy) Error() string { return e.err.Error() }
func (e *busy) Unwrap() error { return e.err }

// join runs Connect for a rank other than 0. A connection rank 0 drops
// before its hello is tried again, with a growing pause, until ctx ends.
func join(ctx context.Context, job Job, key string) (*client, error) {
	pause := firstBackoff
	for {
		conn, err := dial(ctx, job)
		if err != nil {
			return nil, err
		}
		c, err := attach(ctx, conn, job, key, job.Addr)
		if _, again := errors.AsType[*busy](err); !again || ctx.Err() != nil {
			return c, err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		pause = min(2*pause, maxBackoff)
	}
}

// attach runs the handshake on conn, a connection to rank 0 at addr, and
// returns the client, or closes conn.
func attach(ctx context.Context, conn net.Conn, job Job, key, addr string) (*client, error) {
	c := &client{conn: conn, rank: job.Rank, size: job.Size, addr: addr, key: key}
	stop := watch(ctx, []net.Conn{conn})
	err := c.handshake(key)
	if !stop() {
		err = interrupted(ctx, c.rank, "rendezvous handshake")
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// dial connects to rank 0, retrying with a growing pause until ctx ends.
func dial(ctx context.Context, job Job) (net.Conn, error) {
	var d net.Dialer
	pause := firstBackoff
	for {
		conn, err := d.DialContext(ctx, "tcp", job.Addr)
		if err == nil {
			return conn, nil
		}
		if _, bad := errors.AsType[*net.AddrError](err); bad {
			return nil, fmt.Errorf("bootstrap: rank %d: bad rendezvous address %q (COURIER_ADDR): %w: %w", job.Rank, job.Addr, err, errs.ErrInvalid)
		}
		if dns, ok := errors.AsType[*net.DNSError](err); ok && dns.IsNotFound {
			return nil, fmt.Errorf("bootstrap: rank %d: the host of the rendezvous address %q (COURIER_ADDR) is unknown: %w: %w",
				job.Rank, job.Addr, err, errs.ErrInvalid)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bootstrap: rank %d: rank 0 did not answer at %s: %w (last attempt: %v; %s)",
				job.Rank, job.Addr, context.Cause(ctx), err, job.said())
		}
		pause = min(2*pause, maxBackoff)
	}
}

// handshake answers rank 0's challenge, and checks rank 0's proof.
func (c *client) handshake(key string) error {
	p, err := c.expect(frameHello)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return &busy{err} // closed before any frame
		}
		return err
	}
	challenge, err := parseHello(p)
	if err != nil {
		return fmt.Errorf("bootstrap: rank %d: %s: %w", c.rank, c.addr, err)
	}
	facts := rankSize(uint32(c.rank), uint32(c.size))
	m := authMsg{rank: uint32(c.rank), size: uint32(c.size), nonce: auth.Nonce()}
	m.proof = auth.Prove(key, proveContext, challenge, facts)
	if err := writeFrame(c.conn, frameAuth, m.marshal()); err != nil {
		return c.lost(err)
	}
	if p, err = c.expect(frameOK); err != nil {
		return err
	}
	copy(c.session[:], p[auth.MACSize:])
	if !auth.Verify(key, okContext, m.nonce, p[:auth.MACSize], facts, c.session[:]) {
		return &otherJob{fmt.Errorf("%w: rank 0 at %s does not know this job's key (another job's rendezvous?)", ErrRefused, c.addr)}
	}
	return nil
}

// expect reads a frame of type typ and returns its payload; an error frame
// becomes the error it carries.
func (c *client) expect(typ byte) ([]byte, error) {
	t, p, err := readFrameOf(c.conn, string([]byte{typ, frameError}))
	switch {
	case err != nil:
		return nil, c.lost(err)
	case t == frameError:
		return nil, c.remote(p)
	case t != typ:
		return nil, fmt.Errorf("bootstrap: rank %d: %s: %w: frame %q instead of %q", c.rank, c.addr, errProtocol, t, typ)
	}
	return p, nil
}

// remote turns rank 0's error frame into an error.
func (c *client) remote(p []byte) error {
	code, text, err := parseError(p)
	switch {
	case err != nil:
		return fmt.Errorf("bootstrap: rank %d: %s: %w", c.rank, c.addr, err)
	case code == codeRefused && text == keyMismatch:
		return &otherJob{fmt.Errorf("%w: %s (rank 0 at %s)", ErrRefused, text, c.addr)}
	case code == codeRefused:
		return fmt.Errorf("%w: %s (rank 0 at %s)", ErrRefused, text, c.addr)
	default:
		return fmt.Errorf("%w: %s (reported by rank 0)", ErrPeerLost, text)
	}
}

// lost is the error of a broken connection to rank 0.
func (c *client) lost(err error) error {
	return fmt.Errorf("%w: rank 0 (at %s, seen by rank %d): %w", ErrPeerLost, c.addr, c.rank, err)
}

// AllGather sends data to rank 0 and reads back every rank's blob.
func (c *client) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if err := checkBlob(len(data)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent: the exchanger is still usable
	}
	stop := watch(ctx, []net.Conn{c.conn})
	all, err := c.round(data)
	switch {
	case !stop():
		err = interrupted(ctx, c.rank, "all-gather")
	case err != nil && c.closing.Load():
		err = ErrClosed
	}
	if err != nil {
		c.err = err
		c.conn.Close()
		return nil, err
	}
	return all, nil
}

// round sends one blob, with its MAC, and reads Size, checking theirs.
func (c *client) round(data []byte) ([][]byte, error) {
	round := c.rounds
	c.rounds++
	mac := blobMAC(c.key, c.session, c.rank, c.size, round, data)
	if err := writeFrame(c.conn, frameBlob, mac[:], data); err != nil {
		// rank 0 may have said why before it closed.
		if t, p, rerr := readFrame(c.conn); rerr == nil && t == frameError {
			return nil, c.remote(p)
		}
		return nil, c.lost(err)
	}
	all := make([][]byte, c.size)
	for r := range all {
		p, err := c.expect(frameBlob)
		if err != nil {
			return nil, err
		}
		blob, ok := openBlob(c.key, c.session, r, c.size, round, p)
		if !ok {
			return nil, fmt.Errorf("bootstrap: rank %d: %w: the blob of rank %d, from rank 0 at %s", c.rank, ErrTampered, r, c.addr)
		}
		all[r] = blob
	}
	return all, nil
}

// Close closes the connection to rank 0, waits for a pending AllGather to
// return, and makes later ones fail with ErrClosed. It is idempotent.
func (c *client) Close() error {
	c.closing.Store(true)
	c.conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = ErrClosed
	}
	return nil
}
