package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/tcp"
)

// The host connection.
//
// NCCL tells a rank nothing when another rank closes or dies (a receive
// from it just never completes), and carries nothing but payload. So the
// communicator also keeps a host connection to every other rank: a
// communicator of the tcp backend, opened beside the NCCL one. It carries
//
//   - without checks, no user data: one receive from each other rank
//     stays posted on it, and ends when that rank closes, aborts or dies
//     (the tcp backend's goodbye, or the connection breaking), which is
//     how this rank learns of it (ErrPeerLost) instead of waiting for a
//     timeout;
//   - with checks (COURIER_CHECK=1), one 32-byte envelope per message,
//     sent by Isend before the message reaches NCCL;
//   - the messages with negative tags, the library's own (mp.Barrier's
//     one-byte tokens), matched there by tag (conn.internal).
//
// Sending the envelope over the host connection, not through NCCL, is
// what lets a receiver compare it before the payload moves: a receive that
// asks NCCL for more than was sent never completes, and one in the same
// group as its envelope cannot be changed once the envelope shows it.
// Exchanging envelopes in an NCCL group of their own before the payload's
// would deadlock valid programs on one communicator (rank 0 groups a send
// and a receive while rank 1 receives, then sends: rank 0's envelope group
// needs rank 1's second envelope, which rank 1 sends only after its first
// receive, which waits for rank 0's payload group), and it would add an
// NCCL round trip to every message.

// envTag is the tag of envelopes on the host connection.
const envTag = 1

// envSize is the size of an envelope on the wire.
const envSize = 32

// envelope describes one message between two ranks: its sequence number
// in that direction, tag, element type and count.
type envelope struct {
	seq   uint64
	count int64
	tag   int32
	typ   backend.DType
}

// encode writes e into b (little-endian: seq, count, tag, type, zeros).
func (e *envelope) encode(b *[envSize]byte) {
	*b = [envSize]byte{}
	binary.LittleEndian.PutUint64(b[0:], e.seq)
	binary.LittleEndian.PutUint64(b[8:], uint64(e.count))
	binary.LittleEndian.PutUint32(b[16:], uint32(e.tag))
	b[20] = byte(e.typ)
}

// decodeEnvelope reads an envelope and validates it.
func decodeEnvelope(b *[envSize]byte) (envelope, error) {
	e := envelope{
		seq:   binary.LittleEndian.Uint64(b[0:]),
		count: int64(binary.LittleEndian.Uint64(b[8:])),
		tag:   int32(binary.LittleEndian.Uint32(b[16:])),
		typ:   backend.DType(b[20]),
	}
	if !e.typ.Valid() || e.count < 0 {
		return envelope{}, fmt.Errorf("nccl: %w: malformed envelope (type %d, count %d)", backend.ErrCorrupt, b[20], e.count)
	}
	return e, nil
}

// bytesOf views an envelope buffer as a backend.Buffer of 32 bytes.
func bytesOf(b *[envSize]byte) backend.Buffer {
	return backend.Buffer{Ptr: unsafe.Pointer(&b[0]), Count: envSize, Type: backend.Uint8, Mem: backend.Host}
}

// control is the host connection to the other ranks.
type control struct {
	tc     backend.Conn
	spin   spinner        // tc, where it can be polled (spinUntil); else nil
	sender backend.Sender // tc, where it sends a small message in one call; else nil
}

// newControl wraps tc, a tcp communicator.
func newControl(tc backend.Conn) *control {
	k := &control{tc: tc}
	k.spin, _ = tc.(spinner)
	k.sender, _ = tc.(backend.Sender)
	return k
}

// openControl opens the host connection: a tcp communicator among the same
// ranks, found through cfg.Exchange (one more AllGather). With sameHost
// (some ranks share a GPU, and so a host: the IPC path's DESC and DONE
// travel on it), the ranks of one host meet through shared memory
// instead, as the "host" driver does, unless COURIER_TRANSPORTS says
// otherwise.
func openControl(ctx context.Context, cfg backend.Config, sameHost bool) (*control, error) {
	cfg.Check = false
	tc, err := tcp.Driver{Host: sameHost}.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("nccl: opening the host connection to the other ranks: %w", err)
	}
	return newControl(tc), nil
}

// spinner is what the host connection's engine offers a goroutine that
// waits for something other than one of its requests (engine.SpinUntil).
type spinner interface {
	SpinUntil(done func() bool, timeout time.Duration) bool
}

// spinUntil polls the host connection from the calling goroutine until
// done reports true, the engine's spin budget passes with nothing moved,
// or timeout (if positive) passes, and reports whether done did. Where
// the connection cannot be polled (polls reports false) it returns
// done() at once.
func (k *control) spinUntil(done func() bool, timeout time.Duration) bool {
	if k.spin == nil {
		return done()
	}
	return k.spin.SpinUntil(done, timeout)
}

// polls reports whether the host connection can be polled (spinUntil).
func (k *control) polls() bool { return k.spin != nil }

// sendEnvelope sends e to rank to. The tcp backend sends 32 bytes at once
// (it never waits for the receiver), so buf may be reused on return.
func (k *control) sendEnvelope(to int, e *envelope, buf *[envSize]byte) error {
	e.encode(buf)
	return k.send(bytesOf(buf), to, envTag, 0)
}

// send sends b to rank to with tag on the host connection and returns
// once it is sent (b may be reused then): in one call where the
// connection takes the message whole (backend.Sender: an envelope, a
// DESC, a DONE), without a request to complete, wait for and release.
func (k *control) send(b backend.Buffer, to, tag int, caller uintptr) error {
	if k.sender != nil {
		if handled, err := k.sender.Send(b, to, tag, caller); handled {
			return err
		}
	}
	r, err := k.tc.Isend(b, to, tag, caller)
	if err != nil {
		return err
	}
	_, err = r.Wait(0)
	r.Release()
	return err
}

// recv receives the next message from rank from with tag into b, and
// returns when it has.
func (k *control) recv(b backend.Buffer, from, tag int) (backend.Status, error) {
	r, err := k.tc.Irecv(b, from, tag, 0)
	if err != nil {
		return backend.Status{}, err
	}
	st, err := r.Wait(0)
	r.Release()
	return st, err
}

// read is the goroutine that listens to rank p: it hands each envelope to
// the communicator, and reports the rank lost when its connection ends.
// It returns when the connection ends (or this rank closes it).
func (k *control) read(c *conn, p int) {
	defer c.wg.Done()
	buf := &c.peers[p].envIn
	for {
		if _, err := k.recv(bytesOf(buf), p, envTag); err != nil {
			if !errors.Is(err, backend.ErrClosed) {
				c.peerLost(p, err)
			}
			return
		}
		e, err := decodeEnvelope(buf)
		if err == nil {
			err = c.envelopeArrived(p, e)
		}
		if err != nil {
			c.mu.Lock()
			err = fmt.Errorf("nccl: the envelope stream from rank %d: %w", p, err)
			c.failChanLocked(recvChan(p), err)
			c.mu.Unlock()
			return
		}
	}
}

// abort tells the other ranks this rank is gone, without waiting.
func (k *control) abort(err error) { k.tc.Abort(err) }

// close says goodbye to the other ranks and closes the connections.
func (k *control) close() error { return k.tc.Close() }

// envelopeArrived takes the envelope of the next message from rank p:
// the oldest posted receive with its tag takes it (see match.go).
func (c *conn) envelopeArrived(p int, e envelope) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal != nil || c.chans[recvChan(p)].err != nil {
		return nil
	}
	pe := &c.peers[p]
	if e.seq != pe.envNext {
		return fmt.Errorf("envelope of message %d came where %d was due", e.seq, pe.envNext)
	}
	pe.envNext++
	c.announceLocked(p, e)
	return nil
}

// SetReport implements backend.Reporter: the host connection answers the
// other ranks' questions (a world communicator's; a derived one's asks
// and answers nothing).
func (c *conn) SetReport(report func(max int) []byte) {
	if c.ctl == nil {
		return
	}
	if r, ok := c.ctl.tc.(backend.Reporter); ok {
		r.SetReport(report)
	}
}

// AskReports implements backend.Reporter over the host connection, which
// carries frames while NCCL's operations are stuck.
func (c *conn) AskReports(timeout time.Duration) map[int][]byte {
	if c.ctl == nil {
		return map[int][]byte{}
	}
	if r, ok := c.ctl.tc.(backend.Reporter); ok {
		return r.AskReports(timeout)
	}
	return map[int][]byte{}
}
