package tcp

import (
	"errors"
	"net"
	"time"

	"github.com/courier-mp/courier/internal/engine"
)

// writeFrame writes a header, sealed with its check word, and payload as
// one frame, after the rest of a DATA frame a waiter left; under l.wmu.
func (l *link) writeFrame(h *engine.Header, payload []byte) error {
	if _, err := l.flushPart(true); err != nil {
		return err
	}
	h.Encode(&l.whdr)
	engine.Seal(&l.whdr)
	if len(payload) <= smallWrite {
		b := append(l.wsmall[:0], l.whdr[:]...)
		b = append(b, payload...)
		_, err := l.nc.Write(b)
		return err
	}
	l.wvec[0], l.wvec[1] = l.whdr[:], payload
	l.wbufs = l.wvec[:]
	_, err := l.wbufs.WriteTo(l.nc)
	l.wvec[1] = nil
	return err
}

// The DATA of a large message goes out from whoever runs the link's jobs
// (work): a waiting goroutine writes what the socket takes without
// blocking and leaves the rest (the DATA job under way, and the part of a
// frame not yet written) for the next owner, so a waiter never waits on
// the peer and a stream of large messages needs no other thread; the
// writer goroutine, once waiters have gone, writes the rest blocking.
// Every other frame first finishes the part a waiter left, so frames
// never interleave on the socket.

// flushPart writes the part of a frame a non-blocking write left:
// blocking (block), or what the socket takes now. It reports whether
// nothing is left; under l.wmu.
func (l *link) flushPart(block bool) (bool, error) {
	if len(l.part[0])+len(l.part[1]) == 0 {
		return true, nil
	}
	if block || l.rd.rc == nil {
		l.wvec = l.part
		l.wbufs = l.wvec[:]
		_, err := l.wbufs.WriteTo(l.nc)
		l.wvec, l.part = [2][]byte{}, [2][]byte{}
		return err == nil, err
	}
	l.wio.vec = l.part
	cerr := l.rd.rc.Control(l.wio.writeFn)
	n, err := l.wio.n, l.wio.err
	l.wio.vec, l.wio.err = [2][]byte{}, nil
	switch {
	case cerr != nil:
		return false, cerr
	case err == errAgain:
		return false, nil
	case err != nil:
		return false, &net.OpError{Op: "write", Net: "tcp", Err: err}
	}
	for i := range l.part {
		k := min(n, len(l.part[i]))
		l.part[i] = l.part[i][k:]
		n -= k
	}
	return len(l.part[0])+len(l.part[1]) == 0, nil
}

// startData makes j the DATA job under way; false when its send ended
// meanwhile (nothing to write). Under l.wmu, with no job under way.
func (l *link) startData(j engine.Job) bool {
	data, ok := l.p.DataStart(j)
	if !ok {
		return false
	}
	l.dj, l.djData, l.djOff = j, data, 0
	l.djOn.Store(true)
	return true
}

// pushData writes the DATA job under way, chunk by chunk, as far as the
// socket takes it without blocking (block false) or in full, and reports
// whether the job has ended (DataEnd: the send completes, or fails with
// the link's error, which pushData returns). Under l.wmu.
func (l *link) pushData(block bool) (bool, error) {
	for {
		ok, err := l.flushPart(block)
		if err == nil && !ok {
			return false, nil
		}
		if err == nil && l.djOff < len(l.djData) {
			if err = l.p.Down(); err == nil {
				n := min(engine.MaxChunk, len(l.djData)-l.djOff)
				h := engine.DataHeader(l.dj, l.djOff, n)
				h.Encode(&l.partHdr)
				engine.Seal(&l.partHdr)
				l.part = [2][]byte{l.partHdr[:], l.djData[l.djOff : l.djOff+n]}
				l.djOff += n
				if block {
					l.chunks[0]++
				} else {
					l.chunks[1]++
				}
				continue
			}
		}
		l.endData(err)
		return true, err
	}
}

// endData ends the DATA job under way; under l.wmu.
func (l *link) endData(err error) {
	if err != nil {
		l.part = [2][]byte{}
	}
	j := l.dj
	l.dj, l.djData, l.djOff = engine.Job{}, nil, 0
	l.djOn.Store(false)
	l.p.DataEnd(j, err)
}

// work runs the queued jobs in order, unless another goroutine is running
// them (it takes what is queued meanwhile too). The DATA job under way
// comes first. A waiter (polling) writes DATA only as far as the socket
// takes it now, and CTS answers (a header each); it leaves BYE to the
// writer goroutine and wakes it for it. It reports whether it ran a job
// (or wrote some DATA), and whether it wrote BYE (the writer goroutine
// then ends).
func (l *link) work(waiter bool) (ran, bye bool) {
	l.qmu.Lock()
	if l.qbusy {
		l.qmu.Unlock()
		return false, false
	}
	l.qbusy = true
	l.qmu.Unlock()
	ran, bye, wake := l.runJobs(waiter)
	l.qmu.Lock()
	l.qbusy = false
	l.qmu.Unlock()
	if wake {
		l.signal()
	}
	return ran, bye
}

// runJobs is work's loop, with qbusy held; wake: a waiter stopped at a job
// that is the writer goroutine's.
func (l *link) runJobs(waiter bool) (ran, bye, wake bool) {
	for {
		if l.djOn.Load() {
			if waiter && !l.wmu.TryLock() {
				return ran, false, false
			} else if !waiter {
				l.wmu.Lock()
			}
			done, err := false, error(nil)
			if l.djOn.Load() {
				before := l.djOff
				done, err = l.pushData(!waiter)
				ran = ran || done || l.djOff != before
			}
			l.wmu.Unlock()
			if err != nil {
				l.p.Broken(err)
			}
			if !done {
				return ran, false, false
			}
		}
		l.qmu.Lock()
		if len(l.queue) == 0 {
			l.qmu.Unlock()
			return ran, false, false
		}
		j := l.queue[0]
		if waiter && j.Kind == engine.KindBye {
			l.qmu.Unlock()
			return ran, false, true
		}
		if waiter && j.Kind == engine.KindData && !l.wmu.TryLock() {
			l.qmu.Unlock()
			return ran, false, false
		}
		n := copy(l.queue, l.queue[1:])
		l.queue[n] = engine.Job{}
		l.queue = l.queue[:n]
		l.qlen.Store(int32(n))
		l.qmu.Unlock()
		ran = true
		switch j.Kind {
		case engine.KindBye:
			l.sayBye()
			return ran, true, false
		case engine.KindData:
			if !waiter {
				l.wmu.Lock()
			}
			if l.startData(j) {
				_, err := l.pushData(!waiter)
				l.wmu.Unlock()
				if err != nil {
					l.p.Broken(err)
				}
			} else {
				l.wmu.Unlock()
			}
		default:
			if err := l.run(j); err != nil {
				l.p.Broken(err)
			}
		}
	}
}

// handBack wakes the writer goroutine for jobs queued while waiters were
// polling, once the last of them has stopped.
func (l *link) handBack() {
	l.qmu.Lock()
	left := (len(l.queue) > 0 || l.djOn.Load()) && !l.qbusy
	l.qmu.Unlock()
	if left {
		l.signal()
	}
}

// errLinkKilled ends a DATA job that was under way when the link ended.
var errLinkKilled = errors.New("tcp: the link was closed while a large message was being written")

// writeLoop is the writer goroutine: it runs the jobs nobody else runs.
func (l *link) writeLoop() {
	for {
		select {
		case <-l.qsig:
		case <-l.quit:
			// A DATA job a waiter left half written ends with the link.
			l.wmu.Lock()
			if l.djOn.Load() {
				l.endData(errLinkKilled)
			}
			l.wmu.Unlock()
			return
		}
		if _, bye := l.work(false); bye {
			return
		}
	}
}

// run does one writer job of a header: a CTS or a LEAVE. The caller holds
// no lock of the reading side: a write may wait for the peer to read.
func (l *link) run(j engine.Job) error {
	if l.p.Down() != nil {
		return nil
	}
	h := j.Frame()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.writeFrame(&h, nil)
}

// sayBye writes BYE after everything queued before it (a CTS refusal the
// peer is waiting for, say) and shuts down this side of the connection.
func (l *link) sayBye() {
	h := l.p.ByeHeader(false)
	l.wmu.Lock()
	l.writeFrame(&h, nil)
	l.wmu.Unlock()
	if cw, ok := l.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// sayAborted tells the peer, if the socket is free at once, that this rank
// aborted, so it reports that rather than a vanished process.
func (l *link) sayAborted() {
	if !l.wmu.TryLock() {
		return
	}
	defer l.wmu.Unlock()
	l.nc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	h := l.p.ByeHeader(true)
	l.writeFrame(&h, nil)
}
