package engine

import "time"

// Link is the byte transport to one peer: it moves the engine's frames in
// order and knows nothing of matching. The TCP link writes them to a
// socket; the shared-memory link puts them in a ring.
//
// A link delivers what arrives by calling its Peer's Arrive, one frame at a
// time, in order; it reports its end with Peer.Broken. It never waits for a
// user: the goroutine (or poller) that reads a link does not block on
// writing to it, so exchanges in both directions cannot deadlock.
type Link interface {
	// Send writes one EAGER, RTS, ASK or REPLY frame from the calling
	// goroutine, now, in order with the link's other frames, and numbers it
	// (its Seq, from 0 per link). The header is passed by value, so a
	// caller's stays on its stack; the payload may be reused when Send
	// returns. It may block while the transport is busy, never on the
	// peer posting a receive; an error means the link is broken.
	Send(h Header, payload []byte) error
	// Queue hands work to the link's writer, which does it later, in
	// order, without blocking the caller: a CTS answer, the DATA of a send
	// whose CTS came (Peer.SendData), LEAVE (a derived communicator's
	// close), or BYE.
	Queue(j Job)
	// EagerLimit is the largest payload the link sends whole.
	EagerLimit() int64
	// Goodbye queues BYE behind what is queued, and bounds the rest of the
	// link's life by deadline: the peer's BYE, or the deadline, ends it.
	Goodbye(deadline time.Time)
	// Kill ends the link at once; with aborted, it first tells the peer
	// this rank aborted if it can do so without waiting. Its goroutines
	// return soon after; the engine's Close and Abort wait for them.
	Kill(aborted bool)
}

// Job is work for a link's writer.
type Job struct {
	// Kind is KindCTS (write a CTS frame: Flags, SID, RID), KindLeave
	// (write a LEAVE frame: Comm, Flags, Tag), KindData (send the DATA of a
	// large message: call Peer.SendData) or KindBye (write BYE, then end
	// the sending side).
	Kind  uint8
	Flags uint16
	Comm  uint32 // LEAVE: the communicator
	Tag   int32  // LEAVE with LeaveRevoke: the rank (of the job) the sender lost, or -1
	SID   uint64 // the sender's id
	RID   uint64 // the receiver's id
	send  *request
}

// CTS returns the header of a KindCTS job.
func (j *Job) CTS() Header {
	return Header{Kind: KindCTS, Flags: j.Flags, Seq: j.RID, SID: j.SID}
}

// Frame returns the header of a job that writes one frame with no
// payload: KindCTS or KindLeave.
func (j *Job) Frame() Header {
	if j.Kind == KindLeave {
		return Header{Kind: KindLeave, Flags: j.Flags, Comm: j.Comm, Tag: j.Tag}
	}
	return j.CTS()
}

// Puller is a Link that can copy a large message straight out of the
// sender's memory (one copy, as process_vm_readv does). Its sender puts
// the payload's address in the RTS (RTSPull, Addr); the receiver pulls it
// and answers CTSDone.
type Puller interface {
	// PullAddr returns the address the peer should read buf, a message
	// with tag, at, and whether this link offers it to be pulled (tags
	// below 0 are the library's own messages: collectives).
	PullAddr(buf []byte, tag int) (uint64, bool)
	// WantPull reports whether the receiver should pull a message of n
	// bytes with tag that its sender offered (RTSPull), or ask for its
	// DATA instead (CTS): a link may choose per message, by what it has
	// measured of the two ways. posted reports whether the receive was
	// posted before the RTS came: the match is the RTS's arrival, called
	// from the link's own Arrive (its RTS the last one it delivered);
	// otherwise the RTS waited, and the match is the receive's posting.
	WantPull(n int64, tag int, posted bool) bool
	// Pull copies len(dst) bytes, a message with tag, from the peer's
	// memory at addr; sid is the message's id at its sender (its RTS's
	// SID), for a link that asks the sender to copy part of it meanwhile
	// (CTSHelp). An error matching ErrNotSupported makes the engine fall
	// back to CTS and DATA.
	Pull(dst []byte, addr, sid uint64, tag int) error
}

// Poller is a transport whose arrivals a waiting goroutine can take in
// itself, instead of waiting to be woken by the transport's own goroutine:
// the shared-memory transport polls its rings. A goroutine in Wait calls
// SpinStart, and if that reports true, Spin until its request is done or
// its spin budget is spent, then SpinEnd. Poll is the one-off form, for
// callers that do not loop (Test, Iprobe).
type Poller interface {
	// Poll handles what has arrived, without blocking, and reports whether
	// it did anything.
	Poll() bool
	// SpinStart says a goroutine is about to poll in a loop: the
	// transport may stop having its own goroutine woken for arrivals, and
	// may take once, here, what each Poll would take again (a count that
	// keeps its memory mapped). It reports whether the goroutine may Spin:
	// false when the transport is closing, and then SpinEnd is not called.
	SpinStart() bool
	// Spin is Poll between a SpinStart that reported true and its SpinEnd.
	Spin() bool
	// SpinEnd says it stopped; from now the transport's goroutine must
	// take arrivals again: at once when parking is true (the goroutine is
	// about to block on its request, which an arrival must complete),
	// else it may take a short while (the goroutine has its result).
	SpinEnd(parking bool)
}
