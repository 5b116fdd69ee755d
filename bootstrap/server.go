package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/internal/auth"
)

// server is rank 0's side of the rendezvous: one connection per other
// rank, kept open across rounds.
type server struct {
	key   string
	size  int
	conns []net.Conn // by rank; conns[0] is nil. Fixed once Connect returns.

	closing atomic.Bool
	mu      sync.Mutex // held by AllGather and Close
	err     error      // once set, every AllGather returns it
}

// keyMismatch is the text of the refusal of a process that does not know
// the job's key.
const keyMismatch = "connection from another job: job key mismatch"

// joiner is a connection whose rank has proved it knows the key, or the
// error that stopped accepting.
type joiner struct {
	conn net.Conn
	msg  authMsg
	err  error
}

// serve runs rank 0's side of Connect.
func serve(ctx context.Context, job Job, key string) (*server, error) {
	ln := job.Listener
	if ln == nil {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", job.Addr)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank 0 cannot listen on the rendezvous address %q (COURIER_ADDR): %w", job.Addr, err)
		}
		ln = l
	}
	s := &server{key: key, size: job.Size, conns: make([]net.Conn, job.Size)}
	if err := s.admit(ctx, ln); err != nil {
		if errors.Is(err, ErrPeerLost) && ctx.Err() != nil {
			err = fmt.Errorf("%w; %s", err, s.waited(job))
		}
		return nil, err
	}
	return s, nil
}

// admit accepts connections until every rank has joined, then closes ln
// and returns once every goroutine it started has ended. On failure it
// tells the ranks already admitted why, and closes their connections.
func (s *server) admit(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	joins := make(chan joiner)
	var wg sync.WaitGroup
	wg.Go(func() { s.accept(ctx, ln, joins, &wg) })
	code, text, err := s.collect(ctx, joins)
	cancel()
	ln.Close()
	wg.Wait()
	if err != nil {
		s.tell(code, text, -1)
	}
	return err
}

// accept starts a handshake for each connection until ln is closed.
func (s *server) accept(ctx context.Context, ln net.Listener, joins chan<- joiner, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case joins <- joiner{err: err}:
			case <-ctx.Done():
			}
			return
		}
		wg.Go(func() { s.greet(ctx, c, joins) })
	}
}

// greet runs the handshake on c and hands c to collect if the peer proved
// it knows the key. A stranger is sent the reason and closed.
func (s *server) greet(ctx context.Context, c net.Conn, joins chan<- joiner) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	m, err := s.challenge(c)
	if !stop() {
		return // ctx ended and closed c
	}
	if err != nil {
		c.Close()
		return
	}
	select {
	case joins <- joiner{conn: c, msg: m}:
	case <-ctx.Done():
		c.Close()
	}
}

// challenge sends a nonce and checks the answer's proof.
func (s *server) challenge(c net.Conn) (authMsg, error) {
	nonce := auth.Nonce()
	if err := writeFrame(c, frameHello, helloPayload(nonce)); err != nil {
		return authMsg{}, err
	}
	typ, p, err := readFrame(c)
	if err != nil {
		return authMsg{}, err
	}
	if typ != frameAuth {
		return authMsg{}, fmt.Errorf("%w: frame %q instead of auth", errProtocol, typ)
	}
	m, err := parseAuth(p)
	if err != nil {
		return authMsg{}, err
	}
	if !auth.Verify(s.key, proveContext, nonce, m.proof[:], rankSize(m.rank, m.size)) {
		refuse(c, codeRefused, keyMismatch)
		return authMsg{}, fmt.Errorf("%w: %s", ErrRefused, keyMismatch)
	}
	return m, nil
}

// collect seats joiners until every rank is there. On failure it returns
// the error for rank 0, and the code and text of the error frame that
// tells the ranks already seated.
func (s *server) collect(ctx context.Context, joins <-chan joiner) (code byte, text string, err error) {
	for missing := s.size - 1; missing > 0; {
		select {
		case <-ctx.Done():
			text = fmt.Sprintf("rank 0 gave up waiting for ranks %v", s.absent())
			return codeLost, text, fmt.Errorf("%w: %s: %w", ErrPeerLost, text, context.Cause(ctx))
		case j := <-joins:
			if j.err != nil {
				text = "rank 0 stopped accepting connections"
				return codeLost, text, fmt.Errorf("%w: %s: %w", ErrPeerLost, text, j.err)
			}
			seated, refusal := s.seat(j)
			if refusal != "" {
				return codeRefused, refusal, fmt.Errorf("%w: %s", ErrRefused, refusal)
			}
			if seated {
				missing--
			}
		}
	}
	return 0, "", nil
}

// seat admits an authenticated rank, or refuses it, which ends the job (a
// rank that knows the key but disagrees with rank 0 is a broken launch):
// then it returns the reason. A rank that vanished before it could be
// told it was admitted is not seated.
func (s *server) seat(j joiner) (seated bool, refusal string) {
	switch {
	case j.msg.size != uint32(s.size):
		refusal = fmt.Sprintf("size mismatch: rank 0 has %d, you said %d", s.size, j.msg.size)
	case j.msg.rank >= uint32(s.size):
		refusal = fmt.Sprintf("rank %d is out of range for size %d", j.msg.rank, s.size)
	case j.msg.rank == 0 || s.conns[j.msg.rank] != nil:
		refusal = fmt.Sprintf("rank %d joined twice", j.msg.rank)
	}
	if refusal != "" {
		refuse(j.conn, codeRefused, refusal)
		return false, refusal
	}
	proof := auth.Prove(s.key, okContext, j.msg.nonce, rankSize(j.msg.rank, j.msg.size))
	j.conn.SetWriteDeadline(time.Now().Add(lingerTimeout))
	if err := writeFrame(j.conn, frameOK, proof[:]); err != nil {
		j.conn.Close()
		return false, ""
	}
	j.conn.SetWriteDeadline(time.Time{})
	s.conns[j.msg.rank] = j.conn
	return true, ""
}

// waited explains, after rank 0 gave up waiting, what the launcher said,
// and when no rank came at all, that this process may be alone.
func (s *server) waited(job Job) string {
	if len(s.absent()) < s.size-1 {
		return job.said()
	}
	return fmt.Sprintf("no other rank joined, although the launcher said there are %d (%s): "+
		"was this process started alone, with a launcher's variables it inherited, "+
		"or did the other ranks fail before they joined?", s.size, job.said())
}

// absent lists the ranks that have not joined.
func (s *server) absent() []int {
	var ranks []int
	for r := 1; r < s.size; r++ {
		if s.conns[r] == nil {
			ranks = append(ranks, r)
		}
	}
	return ranks
}

// AllGather reads every other rank's blob, then sends each of them all the
// blobs. A rank that is lost fails the round for all: rank 0 tells the
// others which one, and closes every connection.
func (s *server) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if err := checkBlob(len(data)); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent: the exchanger is still usable
	}
	stop := watch(ctx, s.conns)
	all, lost := s.gather(data)
	if lost == nil {
		lost = s.scatter(all)
	}
	if stop() && lost == nil {
		return all, nil
	}
	s.err = s.fail(ctx, lost)
	return nil, s.err
}

// roundErr is the first failure of a round: the rank it involved, and
// whether rank 0's stream to every rank still ends at a frame boundary,
// so that an error frame can follow.
type roundErr struct {
	rank  int
	err   error
	clean bool
}

// gather reads one blob from each rank, concurrently. The first failure
// interrupts the other reads.
func (s *server) gather(data []byte) ([][]byte, *roundErr) {
	all := make([][]byte, s.size)
	all[0] = cloneBlob(data)
	return all, s.each(true, func(r int, c net.Conn) error {
		typ, p, err := readFrame(c)
		switch {
		case err != nil:
			return err
		case typ != frameBlob:
			return fmt.Errorf("%w: frame %q instead of blob", errProtocol, typ)
		}
		all[r] = p
		return nil
	})
}

// scatter sends all to each rank, concurrently.
func (s *server) scatter(all [][]byte) *roundErr {
	return s.each(false, func(_ int, c net.Conn) error { return writeBlobs(c, all) })
}

// each runs f on every connection at once; the first to fail interrupts
// the others, and is returned. clean says whether a failure leaves rank
// 0's streams at a frame boundary (reading does, writing does not).
func (s *server) each(clean bool, f func(rank int, c net.Conn) error) *roundErr {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first *roundErr
	)
	for r, c := range s.conns {
		if c == nil {
			continue
		}
		wg.Go(func() {
			err := f(r, c)
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = &roundErr{rank: r, err: err, clean: clean}
				s.interrupt(clean)
			}
		})
	}
	wg.Wait()
	return first
}

// interrupt makes pending reads (or, when reads is false, all I/O) fail.
func (s *server) interrupt(reads bool) {
	for _, c := range s.conns {
		switch {
		case c == nil:
		case reads:
			c.SetReadDeadline(aLongTimeAgo)
		default:
			c.SetDeadline(aLongTimeAgo)
		}
	}
}

// fail ends the rendezvous after a failed round and returns the error that
// every later AllGather reports.
func (s *server) fail(ctx context.Context, lost *roundErr) error {
	var err error
	switch {
	case s.closing.Load():
		err = ErrClosed
	case ctx.Err() != nil:
		err = interrupted(ctx, 0, "all-gather")
	default:
		err = fmt.Errorf("%w: rank %d: %w", ErrPeerLost, lost.rank, lost.err)
		if lost.clean {
			s.tell(codeLost, fmt.Sprintf("rank %d: %v", lost.rank, lost.err), lost.rank)
			return err
		}
	}
	s.closeAll()
	return err
}

// tell sends every rank but skip an error frame, concurrently, and closes
// all connections.
func (s *server) tell(code byte, text string, skip int) {
	var wg sync.WaitGroup
	for r, c := range s.conns {
		switch {
		case c == nil:
		case r == skip:
			c.Close()
		default:
			wg.Go(func() { refuse(c, code, text) })
		}
	}
	wg.Wait()
}

// closeAll closes every rank's connection.
func (s *server) closeAll() {
	for _, c := range s.conns {
		if c != nil {
			c.Close()
		}
	}
}

// Close closes every connection, waits for a pending AllGather to return,
// and makes later ones fail with ErrClosed. It is idempotent. (The
// listener was closed when the last rank joined.)
func (s *server) Close() error {
	s.closing.Store(true)
	s.closeAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = ErrClosed
	}
	return nil
}

// refuse sends c an error frame and closes c, without destroying the
// frame: closing a socket that still holds unread input resets it, and a
// reset can discard the frame before the peer reads it. So refuse
// half-closes, and drains what the peer still sends until it closes too,
// for lingerTimeout at most.
func refuse(c net.Conn, code byte, text string) {
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(lingerTimeout))
	if writeFrame(c, frameError, errorPayload(code, text)) != nil {
		return
	}
	hc, ok := c.(interface{ CloseWrite() error })
	if !ok || hc.CloseWrite() != nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.Copy(io.Discard, c)
}
