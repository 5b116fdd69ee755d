package mp

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// The collectives over point-to-point messages, for the transports that
// do not run them (backend.Collectives): on host memory, and on device
// memory where the transport moves it device to device (colldevice.go:
// the copies, the combining and the scratch memory then on the GPU).
// Every message carries collTag; each rank's messages to one peer are
// sent, and received, in one order on both sides, so they match in order.
//
// The algorithm depends on the size and the rank count (colltune.go):
//
//	Allreduce      recursive doubling (collrd.go), Reduce + Bcast, ring reduce-scatter + allgather (collring.go)
//	Allgather      recursive doubling or Bruck's (collbruck.go), ring
//	ReduceScatter  recursive doubling of the whole buffer, ring
//	Bcast          a binary tree, binomial tree (colltree.go)
//	Reduce         binomial tree (colltree.go)
//	Alltoall       every pair at once (collalltoall.go)
//	Gather(v)      binomial trees of blocks (gather.go)
//	Scatter(v)     binomial trees of blocks (scatter.go)
//	Allgatherv     as Allgather, with blocks of a length per rank (allgatherv.go)
//	Alltoallv      every pair at once (alltoallv.go)
//	Scan, Exscan   recursive doubling or a chain (scan.go)
//	Barrier        dissemination (barrier.go)
//
// Scratch memory comes from pools (collscratch.go; on the device,
// colldevice.go): in steady state the collectives allocate nothing of
// their own (a transport may, for its messages).

// p2pColl runs a validated collective of host buffers, or of device
// buffers on the device (colldevice.go).
func (c *Comm) p2pColl(co backend.Coll) error {
	p := c.size
	switch co.Kind {
	case backend.Bcast:
		if c.spare && small(bcastBinary, p, co.Recv.Len()) {
			return c.bcastBinary(co.Recv, co.Root)
		}
		return c.bcastTree(co.Recv, co.Root)
	case backend.Reduce:
		return c.reduceTree(co.Send, co.Recv, Op(co.Op), co.Root)
	case backend.Allreduce:
		switch n := co.Send.Len(); {
		case small(allreduceRD, p, n):
			return c.allreduceRD(co.Send, co.Recv, Op(co.Op))
		case small(allreduceTree, p, n) || co.Send.Count < int64(p):
			return c.reduceBcast(co.Send, co.Recv, Op(co.Op))
		}
		return c.allreduceRing(co.Send, co.Recv, Op(co.Op))
	case backend.Allgather:
		if small(allgatherSmall, p, co.Recv.Len()) {
			return c.allgatherSmall(co.Send, co.Recv)
		}
		return c.allgatherRing(co.Send, co.Recv)
	case backend.ReduceScatter:
		if small(reduceScatterSmall, p, co.Send.Len()) {
			return c.reduceScatterRD(co.Send, co.Recv, Op(co.Op))
		}
		return c.reduceScatterRing(co.Send, co.Recv, Op(co.Op))
	case backend.Alltoall:
		return c.alltoallPairs(co.Send, co.Recv)
	case backend.Gather:
		return c.gatherTree(co.Send, co.Recv, evenBlocks(co.Send.Count, p), co.Root)
	case backend.Scatter:
		return c.scatterTree(co.Send, co.Recv, evenBlocks(co.Recv.Count, p), co.Root)
	case backend.Scan, backend.Exscan:
		return c.scan(co.Send, co.Recv, Op(co.Op), co.Kind == backend.Exscan)
	}
	return fmt.Errorf("%w: collective %v", ErrInvalid, co.Kind)
}

// allgatherSmall is the latency-optimal Allgather: recursive doubling on
// a power of two of ranks, Bruck's algorithm on any other count.
func (c *Comm) allgatherSmall(send, recv backend.Buffer) error {
	return c.allgatherSmallv(send, recv, evenBlocks(send.Count, c.size))
}

// allgatherSmallv is allgatherSmall of the blocks l.
func (c *Comm) allgatherSmallv(send, recv backend.Buffer, l blocks) error {
	if c.size&(c.size-1) == 0 {
		return c.allgatherRDv(send, recv, l)
	}
	return c.allgatherBruckv(send, recv, l)
}

// blocks is how a buffer of count elements splits into one block per
// rank: at the offsets offs when they are set (block k is elements
// [offs[k], offs[k+1]): the v-collectives' counts), else of each elements
// when each is set, else as evenly as possible (block k is elements
// [count·k/p, count·(k+1)/p)).
type blocks struct {
	count, each int64
	p           int
	offs        []int64 // p+1 offsets, or nil
}

// evenBlocks is p blocks of each elements.
func evenBlocks(each int64, p int) blocks { return blocks{count: each * int64(p), each: each, p: p} }

// splitBlocks is count elements in p blocks as even as they come.
func splitBlocks(count int64, p int) blocks { return blocks{count: count, p: p} }

// at is block k's first element and length.
func (l blocks) at(k int) (off, n int64) {
	if l.offs != nil {
		return l.offs[k], l.offs[k+1] - l.offs[k]
	}
	if l.each > 0 || l.count == 0 {
		return int64(k) * l.each, l.each
	}
	p := int64(l.p)
	lo, hi := l.count*int64(k)/p, l.count*int64(k+1)/p
	return lo, hi - lo
}

// start is where block k begins, for k in [0, p] (block p: the end).
func (l blocks) start(k int) int64 {
	if k == l.p {
		return l.count
	}
	off, _ := l.at(k)
	return off
}

// span is the number of elements of the n blocks of ranks first,
// first+1, … (modulo p), n at most p.
func (l blocks) span(first, n int) int64 {
	if end := first + n; end <= l.p {
		return l.start(end) - l.start(first)
	}
	return l.count - l.start(first) + l.start(first+n-l.p)
}

// most is the length of the longest block.
func (l blocks) most() int64 {
	if l.each > 0 || l.count == 0 {
		return l.each
	}
	return (l.count + int64(l.p) - 1) / int64(l.p)
}

// block is block k of buffer b, split as l says.
func (l blocks) block(b backend.Buffer, k int) backend.Buffer {
	off, n := l.at(k)
	return sub(b, off, n)
}

// mod is k modulo p, in [0, p).
func mod(k, p int) int { return ((k % p) + p) % p }

// sub is elements [off, off+n) of buffer b (host or device memory).
func sub(b backend.Buffer, off, n int64) backend.Buffer {
	out := backend.Buffer{Count: n, Type: b.Type, Mem: b.Mem, Device: b.Device}
	if n > 0 {
		out.Ptr = unsafe.Add(b.Ptr, off*int64(b.Type.Size()))
	}
	return out
}

// copyHost copies src into dst (host memory of one shape), unless they
// are the same memory. The algorithms copy with copyBuf, which takes
// device memory too.
func copyHost(dst, src backend.Buffer) {
	if dst.Ptr != src.Ptr {
		copy(dst.Bytes(), src.Bytes())
	}
}

// none is the buffer of the side of an exchange that is skipped.
var none backend.Buffer

// exchange sends out to rank to and receives in from rank from, at once
// (either skipped when its rank is -1), and checks that the message
// received filled in. The send is posted first: a send that cannot start
// leaves nothing posted. On failure it also returns the rank of the side
// that failed. The messages carry the line of the program's call
// (collPC).
func (c *Comm) exchange(out backend.Buffer, to int, in backend.Buffer, from int) (int, error) {
	var sr, rr backend.Request
	var err error
	if to >= 0 {
		if sr, err = c.conn.Isend(out, to, collTag, c.collPC); err != nil {
			return to, err
		}
	}
	if from >= 0 {
		rr, err = c.conn.Irecv(in, from, collTag, c.collPC)
	}
	var serr, rerr error
	if sr != nil {
		_, serr = c.wait(sr)
		sr.Release()
	}
	if rr != nil {
		var st Status
		st, rerr = c.wait(rr)
		rr.Release()
		if rerr == nil && st.Count != in.Count {
			rerr = countMismatch(from, st.Count, in.Count)
		}
	}
	switch {
	case err != nil:
		return from, c.disagreement(from, err)
	case serr != nil:
		return to, c.disagreement(to, serr)
	case rerr != nil:
		return from, c.disagreement(from, rerr)
	}
	return -1, nil
}

// disagreement says a transport's refusal of a collective's message (a
// mismatch or a truncation, in words of the library's own tag and
// buffers) in the words of the collective the program called.
func (c *Comm) disagreement(peer int, err error) error {
	if !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrTruncate) || errors.Is(err, ErrPeerLost) {
		return err
	}
	var cm *collMismatch
	if errors.As(err, &cm) {
		return err
	}
	return &collMismatch{
		msg: fmt.Sprintf("rank %d's part of this %s does not fit this rank's: it called another collective, or this one with another count, type or root (every rank must call the same collectives, in the same order, alike)",
			peer, collCallName(c.collCall.Load())),
		truncated: errors.Is(err, ErrTruncate),
	}
}

// collMismatch is a collective whose ranks disagree: it matches
// ErrMismatch (and ErrTruncate, when the transport refused a message too
// large for this rank's part).
type collMismatch struct {
	msg       string
	truncated bool
}

func (e *collMismatch) Error() string { return ErrMismatch.Error() + ": " + e.msg }

func (e *collMismatch) Unwrap() []error {
	if e.truncated {
		return []error{ErrMismatch, ErrTruncate}
	}
	return []error{ErrMismatch}
}

// send sends b to rank to (one side of an exchange).
func (c *Comm) send(b backend.Buffer, to int) error {
	_, err := c.exchange(b, to, none, -1)
	return err
}

// recv receives b from rank from (one side of an exchange).
func (c *Comm) recv(b backend.Buffer, from int) error {
	_, err := c.exchange(none, -1, b, from)
	return err
}

// countMismatch is the error of a collective's message whose count is
// not the one this rank expected.
func countMismatch(from int, got, want int64) error {
	return fmt.Errorf("%w: rank %d sent %d elements where this rank expected %d: do all ranks pass buffers of the same length?",
		ErrMismatch, from, got, want)
}
