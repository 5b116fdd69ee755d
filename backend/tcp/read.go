package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/courier-mp/courier/internal/engine"
)

// reader is a link's receiving side: the one parser of the byte stream
// from the peer, driven by whoever holds link.rmu, the link's reader
// goroutine or a waiting goroutine (poll.go). It never blocks on a socket
// that has a descriptor: it reads what the socket holds now, hands the
// engine every frame that is whole, and keeps the start of a frame that is
// not whole yet in its buffer for the next owner, so frames are neither
// lost nor reordered when the stream changes hands between two frames or
// in the middle of one.
//
// An EAGER frame (at most 64 KiB) is handed over once it is whole in the
// buffer. A DATA frame is handed over in pieces as its bytes come (the
// engine adds them up), each piece read from the socket straight into the
// receive buffer when the read buffer is empty: the socket says how many
// bytes it holds (FIONREAD), so that read cannot block.
//
// The socket is read with unix.Read inside RawConn.Control, which takes no
// lock: the reader goroutine, parked in the netpoller until the socket is
// readable (RawConn.Read, which holds the descriptor's read lock while it
// sleeps), never stops a waiter from reading.
//
// A connection without a descriptor (net.Pipe, in tests) is read by the
// reader goroutine alone, with blocking reads through its buffer.
type reader struct {
	nc   net.Conn
	rc   syscall.RawConn // nil: no descriptor
	b    []byte
	r, w int

	data   engine.Header // the DATA frame being handed over in pieces: SID is the next piece's offset
	left   int64         // its payload bytes not yet handed over (0: no DATA frame under way)
	direct int64         // bytes ReadFull may take from the socket itself (counted by FIONREAD)
	bye    bool          // a BYE has been handed over: nothing follows it
	taken  [2]uint64     // frames handed over by the reader goroutine [0] and by waiters [1], for tests
	io     sysIO         // the owner's system calls
	wait   sysIO         // the reader goroutine's wait, which runs outside rmu
	err    error         // the stream's end or corruption, once seen: every later drain returns it
}

// readBuf is the size of a link's read buffer: a whole EAGER frame fits
// with room for the frames behind it.
const readBuf = 256 << 10

// errShortSocket would mean that the socket gave fewer bytes than it said
// it held: another consumer of the stream, which the design excludes.
var errShortSocket = errors.New("tcp: the socket gave fewer bytes than it held")

func newReader(nc net.Conn) *reader {
	rd := &reader{nc: nc, b: make([]byte, readBuf)}
	rd.io.init()
	rd.wait.init()
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil && probeControl(rc) {
			rd.rc = rc
		}
	}
	return rd
}

func (rd *reader) buffered() int { return rd.w - rd.r }

// room makes the buffer's free space at its end as large as it can be.
func (rd *reader) room() []byte {
	if rd.r == rd.w {
		rd.r, rd.w = 0, 0
	} else if rd.r > 0 && len(rd.b)-rd.w < engine.HeaderSize+int(engine.EagerLimit) {
		n := copy(rd.b, rd.b[rd.r:rd.w])
		rd.r, rd.w = 0, n
	}
	return rd.b[rd.w:]
}

// fill reads into the buffer what the socket holds now and reports
// whether it read anything, and whether that read took all the socket
// held (drained: it gave fewer bytes than the buffer had room for, so the
// kernel's queue was empty when it returned; whatever comes after makes
// the socket readable again, for ppoll, the netpoller and the reader
// goroutine's peek alike). Without a descriptor it blocks until the
// connection gives at least one byte, and never reports drained.
func (rd *reader) fill() (read, drained bool, err error) {
	free := rd.room()
	if len(free) == 0 {
		return false, false, nil
	}
	if rd.rc == nil {
		n, err := rd.nc.Read(free)
		rd.w += n
		if n == 0 && err != nil {
			return false, false, err
		}
		return n > 0, false, nil
	}
	n, err := rd.readNow(free)
	rd.w += n
	return n > 0, n > 0 && n < len(free), err
}

// readNow reads into p what the socket holds, without blocking: 0 and no
// error when it holds nothing; io.EOF at the stream's end.
func (rd *reader) readNow(p []byte) (int, error) {
	rd.io.p = p
	cerr := rd.rc.Control(rd.io.readFn)
	n, err := rd.io.n, rd.io.err
	rd.io.p, rd.io.err = nil, nil
	switch {
	case cerr != nil:
		return 0, cerr
	case err == errAgain:
		return 0, nil
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// held returns the number of bytes the socket holds (0 without a
// descriptor, or on error: the buffered path then reads them).
func (rd *reader) held() int64 {
	if rd.rc == nil {
		return 0
	}
	cerr := rd.rc.Control(rd.io.heldFn)
	n, err := rd.io.n, rd.io.err
	rd.io.err = nil
	if cerr != nil || err != nil {
		return 0
	}
	return int64(n)
}

// waitReadable blocks until the socket has something to read (or has
// ended, or failed), without reading it, so that a waiter may take it
// instead. It returns at once for a connection without a descriptor.
func (rd *reader) waitReadable() error {
	if rd.rc == nil {
		return nil
	}
	err := rd.rc.Read(rd.wait.waitFn)
	if serr := rd.wait.err; err == nil && serr != nil {
		rd.wait.err = nil
		err = &net.OpError{Op: "read", Net: "tcp", Err: serr}
	}
	return err
}

// step hands the engine the next frame, or the next piece of a DATA
// frame, if that needs no waiting, and reports whether it did.
func (rd *reader) step(p *engine.Peer) (bool, error) {
	if rd.left > 0 {
		k := int64(rd.buffered())
		if k == 0 {
			k = rd.held()
			rd.direct = k
		}
		if k == 0 {
			return false, nil
		}
		k = min(k, rd.left)
		h := rd.data
		h.Count = k
		rd.data.SID += uint64(k)
		rd.left -= k
		err := p.Arrive(&h, rd)
		rd.direct = 0
		return true, err
	}
	if rd.buffered() < engine.HeaderSize {
		return false, nil
	}
	if err := engine.Verify(rd.b[rd.r:rd.w]); err != nil {
		return false, fmt.Errorf("from rank %d: %w", p.Rank(), err)
	}
	h, err := engine.DecodeHeader(rd.b[rd.r:rd.w], engine.EagerLimit)
	if err != nil {
		return false, err
	}
	if h.Kind == engine.KindData {
		rd.r += engine.HeaderSize
		rd.data, rd.left = h, h.Count
		return true, nil
	}
	if int64(rd.buffered()-engine.HeaderSize) < h.PayloadLen() {
		return false, nil // the payload's rest has not come yet
	}
	rd.r += engine.HeaderSize
	if h.Kind == engine.KindBye {
		rd.bye = true
	}
	return true, p.Arrive(&h, rd)
}

// drain hands the engine everything that has come, reading the socket
// until it holds nothing more, and reports whether it handed over
// anything. The first error is kept: the stream cannot be trusted after
// it.
//
// A read that gave less than the buffer's room took all the socket held
// (fill's drained), and drain ends once the frames it brought are handed
// over, without the read that would only say EAGAIN: one system call less
// for every message a waiter takes (a message, on a VM, costs a read and
// a write of a microsecond or two each). What comes after that read is
// found by the next poll, or wakes the reader goroutine.
func (rd *reader) drain(p *engine.Peer, waiter bool) (bool, error) {
	if rd.err != nil {
		return false, rd.err
	}
	did, drained := false, false
	for {
		var ok bool
		var err error
		if rd.bye {
			if rd.rc == nil && did {
				// Without a descriptor the read below blocks until the
				// stream ends, which may wait for this rank's own Close:
				// the reader goroutine first sees the goodbye it has just
				// handed over (and ends, if this rank is closing too).
				break
			}
			// Only the stream's end may follow BYE.
			if ok, _, err = rd.fill(); ok {
				err = fmt.Errorf("%w: rank %d sent bytes after its goodbye", engine.ErrFrame, p.Rank())
			}
		} else if ok, err = rd.step(p); err == nil && !ok {
			if drained {
				break
			}
			ok, drained, err = rd.fill()
		}
		if err != nil {
			rd.err = err
			return did, err
		}
		if !ok {
			break
		}
		did = true
		if waiter {
			rd.taken[1]++
		} else {
			rd.taken[0]++
		}
	}
	return did, nil
}

// ReadFull implements engine.Source: the buffered bytes, then the socket,
// straight into dst, for as many bytes as step counted in it.
func (rd *reader) ReadFull(dst []byte) error {
	n := copy(dst, rd.b[rd.r:rd.w])
	rd.r += n
	dst = dst[n:]
	if len(dst) == 0 {
		return nil
	}
	if int64(len(dst)) > rd.direct {
		return fmt.Errorf("%w: a payload of %d more bytes than the socket holds", engine.ErrFrame, int64(len(dst))-rd.direct)
	}
	for len(dst) > 0 {
		k, err := rd.readNow(dst)
		if err != nil {
			return err
		}
		if k == 0 {
			return errShortSocket
		}
		rd.direct -= int64(k)
		dst = dst[k:]
	}
	return nil
}

// Discard implements engine.Source: the frames step hands over whole lie
// in the buffer.
func (rd *reader) Discard(n int) error {
	if n > rd.buffered() {
		return fmt.Errorf("%w: discarding %d bytes of %d buffered", engine.ErrFrame, n, rd.buffered())
	}
	rd.r += n
	return nil
}

// readTick is how often the reader goroutine looks at its socket while
// waiters poll it (they take arrivals themselves): the longest an arrival
// waits for it after the last waiter took its result and left.
const readTick = time.Millisecond

// readLoop is the reader goroutine: it sleeps until the socket is
// readable, then hands the engine what has come, unless a waiter took it
// first. While waiters poll the socket it sleeps on a timer instead. It
// alone reports the stream's end (waiters leave it to the reader
// goroutine, which the end wakes, or its timer).
func (l *link) readLoop() {
	defer l.rdDone.Store(true)
	var tick *time.Timer
	for {
		var werr error
		if p := l.poller; p != nil && p.spinners.Load() > 0 {
			// Waiters read the socket themselves. Parked in the
			// netpoller, this goroutine would be woken by every arrival
			// they take, on a thread that, where ranks fill the cores,
			// can only run by taking a core from one of them; instead it
			// looks again after readTick, or as soon as the last waiter
			// parks (poller.SpinEnd).
			if tick == nil {
				tick = time.NewTimer(readTick)
			} else {
				tick.Reset(readTick)
			}
			select {
			case <-l.kick:
				tick.Stop()
			case <-tick.C:
			case <-l.quit:
				tick.Stop()
			}
		} else {
			werr = l.rd.waitReadable()
		}
		l.rmu.Lock()
		_, err := l.rd.drain(l.p, false)
		bye := l.rd.bye
		l.rmu.Unlock()
		if bye && l.e.Closing() {
			return // both sides said goodbye: nothing more will come
		}
		if werr != nil && (err == nil || errors.Is(err, io.EOF)) {
			err = werr // why the stream ended (a timeout, a reset)
		}
		if err != nil {
			l.p.Broken(err)
			if untrusted(err) {
				l.nc.Close()
			}
			return
		}
	}
}
