package tcp

import (
	"runtime"
	"time"

	"github.com/courier-mp/courier/internal/engine"
)

// writeFrame writes a header, sealed with its check word, and payload as
// one frame; under l.wmu.
func (l *link) writeFrame(h *engine.Header, payload []byte) error {
	h.Encode(&l.whdr)
	engine.Seal(&l.whdr)
	if len(payload) <= smallWrite {
		b := append(l.wsmall[:0], l.whdr[:]...)
		b = append(b, payload...)
		_, err := l.nc.Write(b)
		return err
	}
	if vw, ok := l.nc.(vecWriter); ok {
		return vw.writev(l.whdr[:], payload)
	}
	l.wvec[0], l.wvec[1] = l.whdr[:], payload
	l.wbufs = l.wvec[:]
	_, err := l.wbufs.WriteTo(l.nc)
	l.wvec[1] = nil
	return err
}

// vecWriter is a connection that writes two buffers in one system call
// without allocating (fdConn).
type vecWriter interface{ writev(a, b []byte) error }

// work runs the queued jobs in order, unless another goroutine is running
// them (it takes what is queued meanwhile too). A waiter (polling) runs
// only CTS answers, a header each: it leaves BYE and the DATA of large
// messages to the writer goroutine and wakes it for them, since writing a
// large message may wait as long as the peer does not read, and a waiter
// must come back by its timeout. It reports whether it ran a job, and
// whether it wrote BYE (the writer goroutine then ends).
func (l *link) work(waiter bool) (ran, bye bool) {
	l.qmu.Lock()
	if l.qbusy {
		l.qmu.Unlock()
		return false, false
	}
	l.qbusy = true
	for len(l.queue) > 0 {
		j := l.queue[0]
		if waiter && j.Kind != engine.KindCTS {
			break
		}
		n := copy(l.queue, l.queue[1:])
		l.queue[n] = engine.Job{}
		l.queue = l.queue[:n]
		l.qlen.Store(int32(n))
		l.qmu.Unlock()
		ran = true
		if j.Kind == engine.KindBye {
			l.sayBye()
			l.qmu.Lock()
			bye = true
			break
		}
		if err := l.run(j); err != nil {
			l.p.Broken(err)
		}
		l.qmu.Lock()
	}
	l.qbusy = false
	left := len(l.queue) > 0
	l.qmu.Unlock()
	if left && waiter {
		// The writer goroutine is woken for what a waiter leaves, and
		// the waiter lets it run now: in a rank of one P the spinning
		// waiter hands the P on only every 64 polls (engine.SpinPause),
		// each a sched_yield where ranks fill the cores, so the peer
		// waited that long for the DATA it had asked for. 4 ranks over 2
		// cores, Allgather of 16 MiB: 13.4-13.9 ms against 14.8-17.7
		// (docs/benchmarks.md, "TCP's large writes as raw system
		// calls"). The writer goroutine takes the job; the next poll
		// finds nothing left and does not yield again.
		l.signal()
		runtime.Gosched()
	}
	return ran, bye
}

// handBack wakes the writer goroutine for jobs queued while waiters were
// polling, once the last of them has stopped.
func (l *link) handBack() {
	l.qmu.Lock()
	left := len(l.queue) > 0 && !l.qbusy
	l.qmu.Unlock()
	if left {
		l.signal()
	}
}

// writeLoop is the writer goroutine: it runs the jobs nobody else runs.
func (l *link) writeLoop() {
	for {
		select {
		case <-l.qsig:
		case <-l.quit:
			return
		}
		if _, bye := l.work(false); bye {
			return
		}
	}
}

// run does one writer job: a CTS or a LEAVE, or the DATA of a large
// message, whose chunks go out with writev straight from the send buffer.
// The caller holds no lock of the reading side: a write may wait for the
// peer to read.
func (l *link) run(j engine.Job) error {
	if j.Kind == engine.KindCTS || j.Kind == engine.KindLeave {
		if l.p.Down() != nil {
			return nil
		}
		h := j.Frame()
		l.wmu.Lock()
		defer l.wmu.Unlock()
		return l.writeFrame(&h, nil)
	}
	return l.p.SendData(j, engine.MaxChunk, func(h *engine.Header, payload []byte) error {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		return l.writeFrame(h, payload)
	})
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
