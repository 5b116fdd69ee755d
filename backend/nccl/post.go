package nccl

import (
	"fmt"
	"time"

	"github.com/courier-mp/courier/backend"
)

// validate checks a buffer before it is queued.
func (c *conn) validate(buf backend.Buffer) error {
	if !buf.Type.Valid() {
		return fmt.Errorf("%w: element type %v", backend.ErrInvalid, buf.Type)
	}
	if buf.Count < 0 {
		return fmt.Errorf("%w: negative count %d", backend.ErrInvalid, buf.Count)
	}
	if buf.Count > 0 && buf.Ptr == nil {
		return fmt.Errorf("%w: a buffer of %d elements with no memory", backend.ErrInvalid, buf.Count)
	}
	switch buf.Mem {
	case backend.Host:
	case backend.Device:
		if buf.Device != c.dev {
			return fmt.Errorf("%w: the buffer is on cuda:%d, this rank's communicator on cuda:%d (one GPU per rank; see %s)",
				backend.ErrInvalid, buf.Device, c.dev, DeviceEnv)
		}
	default:
		return fmt.Errorf("%w: memory kind %d", backend.ErrInvalid, buf.Mem)
	}
	return nil
}

// usableLocked reports why a send to (or a receive from) rank peer
// cannot start. A rank that left can still be received from: in checked
// mode, the messages it announced before it left (matchRecvLocked refuses
// the others); otherwise any (a receive of a message it never sent then
// fails lostGrace later).
func (c *conn) usableLocked(peer int, recv bool) error {
	if c.fatal != nil {
		return c.fatal
	}
	if peer == c.rank {
		return nil
	}
	ch := sendChan(peer)
	if recv {
		ch = recvChan(peer)
	}
	if err := c.chans[ch].err; err != nil {
		return err
	}
	if p := &c.peers[peer]; p.lost != nil && !recv {
		return p.lost
	}
	return nil
}

// Isend implements backend.Conn. It queues the send and returns at once;
// the send reaches NCCL at the next wait, test or Done on this
// communicator. buf must not change until the request completes. A send to
// this rank itself is matched and copied at once and completes at once.
func (c *conn) Isend(buf backend.Buffer, dest, tag int, caller uintptr) (backend.Request, error) {
	return c.post(false, buf, dest, tag, caller)
}

// Irecv implements backend.Conn. It queues the receive and returns at
// once. Without checks, the receive takes the next message from source
// that no earlier receive from source takes, whatever its tag (NCCL
// delivers in order and has no tags); with checks, the oldest message from
// source with its tag (match.go); from this rank itself, the oldest with
// its tag. AnySource and AnyTag are not supported.
func (c *conn) Irecv(buf backend.Buffer, source, tag int, caller uintptr) (backend.Request, error) {
	if source == backend.AnySource && tag == backend.ShrinkTag {
		return c.internal(true, buf, source, tag, caller) // Shrink's agreement, over the host connection
	}
	if source == backend.AnySource || tag == backend.AnyTag {
		return nil, fmt.Errorf("%w: the nccl backend cannot match AnySource or AnyTag: a receive must name its source and tag "+
			"(NCCL delivers each rank's messages in order; use the tcp backend for wildcards)",
			backend.ErrNotSupported)
	}
	return c.post(true, buf, source, tag, caller)
}

// post is what Isend and Irecv share: it checks the peer and the buffer,
// hands a message with a negative tag to the host connection (internal),
// unless it is device memory to or from a rank of the IPC path, and
// otherwise makes the request and, with the mutex held, places it
// (placeSendLocked, placeRecvLocked) if its channel is usable. A request
// that cannot be placed is recycled, never handed out.
func (c *conn) post(recv bool, buf backend.Buffer, peer, tag int, caller uintptr) (backend.Request, error) {
	if peer < 0 || peer >= c.size {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, peer, c.size)
	}
	if err := c.validate(buf); err != nil {
		return nil, err
	}
	if tag < 0 && peer != c.rank && !c.ipcLibrary(buf, peer) {
		return c.internal(recv, buf, peer, tag, caller)
	}
	r := newRequest(c, recv, buf, peer, tag, caller)
	c.mu.Lock()
	if c.trace != nil {
		c.trace.posted(time.Now())
	}
	err := c.usableLocked(peer, recv)
	if err == nil {
		err = c.revokedForLocked(tag)
	}
	if err == nil {
		if recv {
			err = c.placeRecvLocked(r)
		} else {
			err = c.placeSendLocked(r)
		}
	}
	if err != nil {
		r.recycle()
		c.mu.Unlock()
		return nil, err
	}
	var own *ipcPeer // a send of the IPC path, for its poster to describe
	if !recv && r.stage == stageIPC && describedByPoster(r) {
		own = c.ipcPeerOf(peer)
	}
	c.mu.Unlock()
	if own != nil {
		c.describeOwn(own)
	}
	return r, nil
}

// placeSendLocked places send r: to this rank itself, it is matched and
// copied at once (self.go); to another, with checks its envelope goes to
// the receiver first (control.go), and it is queued.
func (c *conn) placeSendLocked(r *request) error {
	if r.peer == c.rank {
		return c.sendSelfLocked(r)
	}
	if ip := c.ipcPeerOf(r.peer); ip != nil {
		return c.placeIPCLocked(ip, r)
	}
	if c.check {
		p := &c.peers[r.peer]
		r.seq = p.sendSeq
		env := envelope{seq: r.seq, tag: int32(r.tag), typ: r.buf.Type, count: r.buf.Count}
		if err := c.ctl.sendEnvelope(r.peer, &env, &c.envOut); err != nil {
			return err
		}
		p.sendSeq++
	}
	c.queue = append(c.queue, r)
	return nil
}

// placeRecvLocked places receive r: from this rank itself, it is matched
// in memory (self.go); with checks, against the messages its peer
// announced (match.go), failing with why the peer is gone if it can never
// match; otherwise it is queued.
func (c *conn) placeRecvLocked(r *request) error {
	if r.peer == c.rank {
		c.recvSelfLocked(r)
		return nil
	}
	if ip := c.ipcPeerOf(r.peer); ip != nil {
		return c.placeIPCLocked(ip, r)
	}
	if c.check {
		if !c.matchRecvLocked(r) {
			return c.peers[r.peer].lost // not nil: matchRecvLocked says so
		}
		return nil
	}
	c.queue = append(c.queue, r)
	return nil
}

// ipcLibrary reports whether a message of the library's own (a negative
// tag) in buf to or from rank peer takes the IPC path rather than the
// host connection: device memory between ranks that share a GPU, which
// the IPC path copies device to device (package mp's collectives of
// device buffers on the device; see DeviceDirect). The IPC path matches
// by tag, so no receive of the program's can take such a message; the
// library's messages in host memory keep to the host connection, and
// both sides of a message pick alike, from the memory of its buffers.
func (c *conn) ipcLibrary(buf backend.Buffer, peer int) bool {
	return buf.Mem == backend.Device && c.ipcPeerOf(peer) != nil
}

// DeviceDirect implements backend.DeviceDirect: true when every other
// rank shares this rank's GPU, so that all of them meet on the IPC path,
// where device memory moves device to device whatever the tag (the
// receiver's copy engine reads the sender's memory). Package mp then runs
// its collectives of device buffers on the GPU. With a channel to any
// rank (NCCL's, which would carry the library's device messages only
// through the host connection, in host memory), false.
func (c *conn) DeviceDirect() bool {
	if c.ipc == nil || c.size < 2 {
		return false
	}
	for p := range c.size {
		if p != c.rank && c.ipcPeerOf(p) == nil {
			return false
		}
	}
	return true
}

// internal sends or receives a message with a negative tag: the
// library's own traffic (mp's Barrier), which travels over the host
// connection and is matched there by tag. Kept off NCCL, it can never be
// taken by a user's receive posted before it, as it would be on a channel
// that delivers in order whatever the tags.
func (c *conn) internal(recv bool, buf backend.Buffer, peer, tag int, caller uintptr) (backend.Request, error) {
	c.mu.Lock()
	err := c.fatal
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if c.ctl == nil {
		return nil, fmt.Errorf("%w: a communicator of one rank has no host connection", backend.ErrInvalid)
	}
	if buf.Mem != backend.Host {
		return nil, fmt.Errorf("%w: messages with negative tags (the library's own) travel over the host connection and must be in host memory",
			backend.ErrNotSupported)
	}
	// The program's queued operations go to NCCL now: a rank about to
	// wait for the library's messages (a Barrier, a collective over
	// point-to-point) must not hold back a send its peers wait for first.
	c.poke()
	if recv {
		return c.ctl.tc.Irecv(buf, peer, tag, caller)
	}
	return c.ctl.tc.Isend(buf, peer, tag, caller)
}
