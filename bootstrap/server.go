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
	key     string
	size    int
	conns   []net.Conn           // by rank; conns[0] is nil. Fixed once Connect returns.
	session [auth.NonceSize]byte // this rendezvous's nonce, in every blob's MAC
	rounds  uint64               // rounds begun; under mu

	// Connections refused for a wrong key while ranks were awaited, and
	// the address of the last one, for the give-up message.
	refusedMu   sync.Mutex
	refusedKeys int
	refusedFrom string
	// failed, once set, is the error frame (code, text) that answers every
	// new connection while rank 0 lingers after a failed admission.
	failed  atomic.Pointer[refusal]
	failing chan struct{} // closed once failed is set

	closing atomic.Bool
	mu      sync.Mutex // held by AllGather and Close
	err     error      // once set, every AllGather returns it
}

// keyMismatch is the text of the refusal of a process that does not know
// the job's key.
const keyMismatch = "connection from another job: job key mismatch"

// handshakeTimeout bounds one connection's handshake on rank 0: a peer
// that has not proved it knows the key by then is dropped. (A variable
// for tests.)
var handshakeTimeout = 5 * time.Second

// maxUnauthenticated bounds the connections rank 0 handshakes at once. One
// more is closed as soon as it is accepted; a rank of the job whose
// connection that was tries again.
const maxUnauthenticated = 64

// failLinger is how long rank 0, once the admission failed while ranks
// were still missing, keeps answering new connections with the reason, so
// that ranks that come late learn that the job failed instead of waiting
// for rank 0 until their deadline.
const failLinger = time.Second

// refusal is an error frame's code and text.
type refusal struct {
	code byte
	text string
}

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
	s := &server{key: key, size: job.Size, conns: make([]net.Conn, job.Size), session: auth.Nonce(),
		failing: make(chan struct{})}
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
//
// When the admission fails while ranks are still missing and the caller's
// ctx lives, rank 0 answers new connections with the reason for
// failLinger first.
func (s *server) admit(parent context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(parent)
	joins := make(chan joiner)
	var wg sync.WaitGroup
	wg.Go(func() { s.accept(ctx, ln, joins, &wg) })
	code, text, err := s.collect(ctx, joins)
	if err != nil && parent.Err() == nil && len(s.absent()) > 0 {
		s.failed.Store(&refusal{code: code, text: text})
		close(s.failing)
		t := time.NewTimer(failLinger)
		select {
		case <-t.C:
		case <-parent.Done():
			t.Stop()
		}
	}
	cancel()
	ln.Close()
	wg.Wait()
	if err != nil {
		s.tell(code, text, -1)
	}
	return err
}

// accept starts a handshake for each connection until ln is closed, at
// most maxUnauthenticated at once: a connection beyond them is closed at
// once. Transient errors (no file descriptor left) pause it briefly.
func (s *server) accept(ctx context.Context, ln net.Listener, joins chan<- joiner, wg *sync.WaitGroup) {
	slots := make(chan struct{}, maxUnauthenticated)
	pause := firstBackoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() && ctx.Err() == nil {
				t := time.NewTimer(pause)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				pause = min(2*pause, maxBackoff)
				continue
			}
			select {
			case joins <- joiner{err: err}:
			case <-ctx.Done():
			}
			return
		}
		pause = firstBackoff
		if f := s.failed.Load(); f != nil {
			wg.Go(func() { refuse(c, f.code, f.text) })
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			c.Close() // too many handshakes at once
			continue
		}
		wg.Go(func() { s.greet(ctx, c, joins, slots) })
	}
}

// greet runs the handshake on c, within handshakeTimeout, and hands c to
// collect if the peer proved it knows the key; it frees its slot once the
// handshake is over. A stranger is sent the reason and closed, or just
// closed.
func (s *server) greet(ctx context.Context, c net.Conn, joins chan<- joiner, slots <-chan struct{}) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	m, err := s.challenge(c)
	<-slots
	if !stop() {
		return // ctx ended and closed c
	}
	if err != nil {
		if errors.Is(err, ErrRefused) {
			s.refusedMu.Lock()
			s.refusedKeys++
			s.refusedFrom = c.RemoteAddr().String()
			s.refusedMu.Unlock()
		}
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	select {
	case joins <- joiner{conn: c, msg: m}:
	case <-s.failing:
		f := s.failed.Load()
		refuse(c, f.code, f.text)
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
	_, p, err := readFrameOf(c, string(frameAuth))
	if err != nil {
		return authMsg{}, err
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
			s.refusedMu.Lock()
			if n := s.refusedKeys; n > 0 {
				text += fmt.Sprintf(" (it refused %d %s with a wrong job key, the last from %s: "+
					"was a rank started with another COURIER_JOB_KEY, or of another job?)", n, plural(n, "connection"), s.refusedFrom)
			}
			s.refusedMu.Unlock()
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
	proof := auth.Prove(s.key, okContext, j.msg.nonce, rankSize(j.msg.rank, j.msg.size), s.session[:])
	j.conn.SetWriteDeadline(time.Now().Add(lingerTimeout))
	if err := writeFrame(j.conn, frameOK, proof[:], s.session[:]); err != nil {
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
	round := s.rounds
	s.rounds++
	all, macs, lost := s.gather(round, data)
	if lost == nil {
		lost = s.scatter(all, macs)
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

// gather reads one blob from each rank, concurrently, and checks its MAC;
// it returns the blobs and their MACs. The first failure interrupts the
// other reads.
func (s *server) gather(round uint64, data []byte) ([][]byte, [][auth.MACSize]byte, *roundErr) {
	all := make([][]byte, s.size)
	macs := make([][auth.MACSize]byte, s.size)
	all[0] = cloneBlob(data)
	macs[0] = blobMAC(s.key, s.session, 0, s.size, round, all[0])
	return all, macs, s.each(true, func(r int, c net.Conn) error {
		_, p, err := readFrameOf(c, string(frameBlob))
		if err != nil {
			return err
		}
		blob, ok := openBlob(s.key, s.session, r, s.size, round, p)
		if !ok {
			return fmt.Errorf("%w: the blob rank %d sent", ErrTampered, r)
		}
		all[r] = blob
		copy(macs[r][:], p)
		return nil
	})
}

// scatter sends all, with their MACs, to each rank, concurrently.
func (s *server) scatter(all [][]byte, macs [][auth.MACSize]byte) *roundErr {
	return s.each(false, func(_ int, c net.Conn) error { return writeBlobs(c, all, macs) })
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

// plural is noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
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
