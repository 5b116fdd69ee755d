package mp

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Op is a reduction operator of Reduce, Allreduce, ReduceScatter, Scan
// and Exscan (and their non-blocking forms): it combines the ranks'
// buffers element by element. The operators are the constants Sum, Prod,
// Min and Max; the zero Op is none of them, and a call given it fails with
// ErrInvalid.
type Op uint8

// The reduction operators. Sum and Prod apply to every element type
// (integers wrap around); Min and Max to every type but complex64 and
// complex128. Float16 and BFloat16 are combined in float32 and rounded to
// nearest, even, after each step.
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
)

// The operators have the transports' values, so converting is free (a
// difference fails to compile: a negative constant overflows uint8, a
// positive one gives the array a length other than 0).
var (
	_ [0]struct{} = [uint8(Sum) - uint8(backend.Sum)]struct{}{}
	_ [0]struct{} = [uint8(Prod) - uint8(backend.Prod)]struct{}{}
	_ [0]struct{} = [uint8(Min) - uint8(backend.Min)]struct{}{}
	_ [0]struct{} = [uint8(Max) - uint8(backend.Max)]struct{}{}
)

// String is the operator's name: "sum", "prod", "min", "max", or
// "op(N)" for a value that is none of them.
func (o Op) String() string { return backend.ReduceOp(o).String() }

// reduceOp is o as the transports name it (the same values).
func (o Op) reduceOp() backend.ReduceOp { return backend.ReduceOp(o) }

// Collectives. Every rank of the communicator calls the same collectives,
// in the same order, with the same root and operator and buffers of the
// same element type and shape; the calls of one rank come from one
// goroutine at a time (a second goroutine's call waits for the first). A
// collective returns when this rank's part is done: its receive buffer
// holds the result and its send buffer may be reused. Like every message
// call it blocks the calling goroutine at most until the communicator's
// timeout, and its errors wrap the same sentinels (a rank that calls a
// different collective, or passes a different count, makes the others fail
// with ErrMismatch or ErrTruncate where the transport can tell, or time
// out where it cannot).
//
// Host and device buffers work on every backend. On nccl, NCCL runs the
// collective itself on a communicator of all the ranks (device buffers
// directly, host buffers staged through the GPU); on host, when every
// rank is on this host, small Allreduce, Reduce, Bcast and Allgather calls
// (and Barrier) of host buffers run through shared memory, each rank
// writing its part once and reading the others' straight out of their
// memory (every rank combining in rank order, so all get the same bits);
// elsewhere, and beyond those sizes, courier runs it
// over point-to-point messages, with an algorithm chosen by size and rank
// count: for small buffers recursive doubling (Allreduce, ReduceScatter,
// Allgather on a power of two of ranks) and Bruck's Allgather (any other
// count), ⌈log2 N⌉ steps; Allreduce as a Reduce and a Bcast where fewer
// messages matter more than fewer steps; for large buffers rings
// (Allreduce, Allgather, ReduceScatter), which move each byte the fewest
// times; binomial trees for Bcast and Reduce, and every pair at once for
// Alltoall. Allreduce gives every rank the same bits whatever the
// algorithm. Device buffers of a collective that courier runs itself take
// the same algorithms on the GPU where the transport moves device memory
// device to device (on nccl, ranks that all share one GPU: the copies,
// the combining kernels and the scratch memory on the GPU, every byte
// device to device; COURIER_DEVICE_COLL=staged turns it off), and are
// staged through host memory elsewhere (copied there once, combined
// there, copied back): the same bits either way, but for the NaN that a
// Sum or a Prod of floats makes, which a GPU makes its own. Where a
// collective runs on the GPU every rank must pass device buffers (a rank
// with host buffers would wait for messages that never come, until the
// timeout; with COURIER_CHECK=1 every rank fails at once with
// ErrMismatch). On host buffers courier's part of a collective allocates
// nothing in steady state (scratch memory is pooled); on the GPU its
// scratch memory is the communicator's, kept from one collective to the
// next and freed at Close. Messages of collectives never match a user's
// receive (the library's own tags are negative), and they may interleave
// with a user's point-to-point messages in any way.

// Bcast sends root's buf to every other rank's buf. Every rank passes a
// buffer of the same length.
//
//go:noinline
func Bcast[B Buffer](c *Comm, buf B, root int) error {
	b := describe(buf)
	return c.collective(backend.Coll{Kind: backend.Bcast, Send: b, Recv: b, Root: root, Caller: callerPC()})
}

// Reduce combines every rank's send with op, element by element, into
// recv at root. recv must have send's length at root and is not used
// elsewhere (pass nil there). recv may be send itself.
//
//go:noinline
func Reduce[B Buffer](c *Comm, send, recv B, op Op, root int) error {
	return c.collective(backend.Coll{Kind: backend.Reduce, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Root: root, Caller: callerPC()})
}

// Allreduce combines every rank's send with op, element by element, into
// every rank's recv (of send's length); every rank gets the same bits.
// recv may be send itself (in place).
//
//go:noinline
func Allreduce[B Buffer](c *Comm, send, recv B, op Op) error {
	return c.collective(backend.Coll{Kind: backend.Allreduce, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()})
}

// Allgather gathers every rank's send into every rank's recv, rank k's at
// block k: recv holds Size blocks of len(send) elements. send may be this
// rank's own block of recv (in place).
//
//go:noinline
func Allgather[B Buffer](c *Comm, send, recv B) error {
	return c.collective(backend.Coll{Kind: backend.Allgather, Send: describe(send), Recv: describe(recv), Caller: callerPC()})
}

// ReduceScatter combines every rank's send with op, element by element,
// and scatters the result: send holds Size blocks of len(recv) elements,
// and rank k's recv gets the combination of every rank's block k. recv may
// be this rank's own block of send (in place).
//
//go:noinline
func ReduceScatter[B Buffer](c *Comm, send, recv B, op Op) error {
	return c.collective(backend.Coll{Kind: backend.ReduceScatter, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()})
}

// Alltoall sends block k of send to rank k and receives rank j's block
// into block j of recv: send and recv hold Size blocks of one length.
// recv may be send itself (in place; courier then copies send first).
//
//go:noinline
func Alltoall[B Buffer](c *Comm, send, recv B) error {
	return c.collective(backend.Coll{Kind: backend.Alltoall, Send: describe(send), Recv: describe(recv), Caller: callerPC()})
}

// bcast is Bcast of b, called at pc.
func (c *Comm) bcast(b backend.Buffer, root int, pc uintptr) error {
	return c.collective(backend.Coll{Kind: backend.Bcast, Send: b, Recv: b, Root: root, Caller: pc})
}

// collective validates a collective, then runs it: locally on one rank,
// by the transport where it can, else over point-to-point messages.
func (c *Comm) collective(co backend.Coll) error {
	name := co.Kind.String()
	peer := -1
	if co.Kind.Rooted() {
		peer = co.Root
	}
	if err := c.checkColl(&co); err != nil {
		return c.opErr(name, peer, -1, err)
	}
	var span uint64
	if traceOn.Load() {
		span = c.traceColl(uint32(co.Kind), &co)
	}
	c.collLock(co.Caller, uint32(co.Kind), span)
	defer c.collUnlock()
	return c.traceEnd(span, c.opErr(name, peer, -1, c.runColl(co)))
}

// checkColl validates co's arguments and normalizes them: a non-root's
// Reduce receive buffer is dropped.
func (c *Comm) checkColl(co *backend.Coll) error {
	if c == nil {
		return invalidf("nil *Comm")
	}
	if co.Kind.Rooted() && (co.Root < 0 || co.Root >= c.size) {
		return invalidf("root %d is not in [0, %d)", co.Root, c.size)
	}
	t := co.Send.Type
	if co.Kind.Reduces() && !co.Op.AppliesTo(t) {
		if !co.Op.Valid() {
			return invalidf("no reduction operator %v (use Sum, Prod, Min or Max)", co.Op)
		}
		return invalidf("%v is not defined on %v", co.Op, t)
	}
	if (co.Kind == backend.Reduce || co.Kind == backend.Gather) && c.rank != co.Root {
		co.Recv = emptyLike(co.Send)
	}
	if co.Kind == backend.Scatter && c.rank != co.Root {
		co.Send = emptyLike(co.Recv)
	}
	n, p := co.Send.Count, int64(c.size)
	want := n // of recv
	switch co.Kind {
	case backend.Allgather:
		want = n * p
	case backend.ReduceScatter:
		if n%p != 0 {
			return invalidf("the send buffer has %d elements: want %d blocks of one length (one per rank)", n, p)
		}
		want = n / p
	case backend.Alltoall:
		if n%p != 0 {
			return invalidf("the send buffer has %d elements: want %d blocks of one length (one per rank)", n, p)
		}
	case backend.Reduce:
		if c.rank != co.Root {
			want = 0
		}
	case backend.Gather:
		want = 0
		if c.rank == co.Root {
			want = n * p
		}
	case backend.Scatter:
		if c.rank == co.Root && n != co.Recv.Count*p {
			return invalidf("the send buffer has %d elements, want %d blocks of the receive buffer's %d (one per rank)", n, p, co.Recv.Count)
		}
		want = co.Recv.Count
	}
	if co.Recv.Count != want {
		return invalidf("the receive buffer has %d elements, want %d (the send buffer has %d, and %d ranks)", co.Recv.Count, want, n, p)
	}
	if co.Send.Mem != co.Recv.Mem || co.Send.Mem == backend.Device && co.Send.Device != co.Recv.Device && co.Recv.Count > 0 && n > 0 {
		return invalidf("the send and receive buffers are in different memories")
	}
	if overlapsBadly(co, c.rank) {
		return invalidf("the send and receive buffers overlap (in place, pass the same buffer%s)", inPlaceHint(co.Kind))
	}
	return nil
}

// inPlaceHint says how a collective is called in place where that is not
// passing one buffer twice.
func inPlaceHint(k backend.CollKind) string {
	switch k {
	case backend.Allgather, backend.Gather:
		return ", or this rank's block of the receive buffer as the send buffer"
	case backend.ReduceScatter, backend.Scatter:
		return ", or this rank's block of the send buffer as the receive buffer"
	}
	return ""
}

// overlapsBadly reports whether co's buffers overlap other than in the
// ways a collective can run in place.
func overlapsBadly(co *backend.Coll, rank int) bool {
	s, r := co.Send, co.Recv
	if s.Count == 0 || r.Count == 0 || co.Kind == backend.Bcast {
		return false
	}
	sa, ra := uintptr(s.Ptr), uintptr(r.Ptr)
	sb, rb := sa+uintptr(s.Len()), ra+uintptr(r.Len())
	if sa >= rb || ra >= sb {
		return false
	}
	switch co.Kind {
	case backend.Allgather, backend.Gather:
		return sa != ra+uintptr(int64(rank)*s.Len())
	case backend.ReduceScatter, backend.Scatter:
		return ra != sa+uintptr(int64(rank)*r.Len())
	}
	return sa != ra || s.Count != r.Count
}

// runColl runs a validated collective.
func (c *Comm) runColl(co backend.Coll) error {
	if c.size == 1 {
		if co.Kind == backend.Exscan {
			return nil // rank 0's receive buffer is left as it is
		}
		return copyLocal(co.Recv, co.Send)
	}
	if err := c.revokedErr(); err != nil {
		return err
	}
	if c.check {
		if err := c.agree(co); err != nil {
			return err
		}
	}
	return c.runAgreed(co)
}

// runAgreed runs a validated collective of more than one rank, after the
// checks (agree) where they are on.
func (c *Comm) runAgreed(co backend.Coll) error {
	if co.Send.Count == 0 && co.Recv.Count == 0 {
		return nil // nothing moves: every rank passes empty buffers
	}
	if done, err := c.transportColl(co); done {
		return err
	}
	if isDevice(co.Send, co.Recv) && !c.onDeviceFor(co) {
		return c.stagedColl(co)
	}
	return c.p2pColl(co) // host memory, or device memory on the device (colldevice.go)
}

// transportColl runs co through the transport's own collectives, where
// it has them and takes co, and reports whether it did (false: run it
// over point-to-point messages), with the collective's error. A
// transport that can run co to its end on this goroutine
// (backend.CollRunner) is asked that way, not through Collective: no
// request when the parts come at once.
func (c *Comm) transportColl(co backend.Coll) (bool, error) {
	var (
		r   backend.Request
		err error
	)
	switch cc := c.conn.(type) {
	case backend.CollRunner:
		if r, err = cc.RunCollective(co); err == nil && r == nil {
			return true, nil
		}
	case backend.Collectives:
		r, err = cc.Collective(co)
	default:
		return false, nil
	}
	if err != nil {
		return !errors.Is(err, backend.ErrSkip), err
	}
	_, err = c.wait(r)
	r.Release()
	return true, err
}

// onDeviceFlag marks, in agree's description of a collective, one whose
// device buffers it runs on the device (its messages in device memory).
const onDeviceFlag = 1 << 8

// agree is the collectives' part of the checks (COURIER_CHECK=1): before
// a collective runs, the ranks gather each one's description of it (which
// collective, operator, root, element type and whether its device buffers
// are combined on the device, send count) over
// point-to-point messages, and if any rank's differs from rank 0's every
// rank fails with the same ErrMismatch, naming it, and nothing moves. A
// transport cannot tell otherwise: on NCCL a count that differs hangs or
// overruns a buffer, and an operator or root that differs gives wrong
// data everywhere. It costs an Allgather of 40 bytes per rank
// (⌈log2 N⌉ steps) per collective.
func (c *Comm) agree(co backend.Coll) error {
	// This rank's description and everyone's, in scratch memory (a
	// transport keeps what it is given).
	s := getScratch(int64(5 * 8 * (c.size + 1)))
	desc, gathered := s.buf(0, backend.Int64, 5), s.buf(5*8, backend.Int64, int64(5*c.size))
	mine := view[int64](desc)
	typ := int64(co.Send.Type)
	if isDevice(co.Send, co.Recv) && c.onDeviceFor(co) {
		// Its messages are device memory (colldevice.go): a rank whose
		// are host memory would never meet them.
		typ |= onDeviceFlag
	}
	copy(mine, []int64{int64(co.Kind), 0, -1, typ, co.Send.Count})
	if co.Kind == backend.Scatter {
		mine[4] = co.Recv.Count // the root's send holds every block
	}
	if co.Kind.Reduces() {
		mine[1] = int64(co.Op)
	}
	if co.Kind.Rooted() {
		mine[2] = int64(co.Root)
	}
	if err := c.allgatherSmall(desc, gathered); err != nil {
		s.release(err)
		return err
	}
	defer s.release(nil)
	all := view[int64](gathered)
	say := func(d []int64) string {
		s := fmt.Sprintf("%v of %d × %v", backend.CollKind(d[0]), d[4], backend.DType(d[3]&^onDeviceFlag))
		if d[3]&onDeviceFlag != 0 {
			s += " in device memory, on the device"
		}
		if d[1] != 0 {
			s += " with " + backend.ReduceOp(d[1]).String()
		}
		if d[2] >= 0 {
			s += fmt.Sprintf(" (root %d)", d[2])
		}
		return s
	}
	for k := 1; k < c.size; k++ {
		if !slices.Equal(all[5*k:5*k+5], all[:5]) {
			return fmt.Errorf("%w: rank %d called %s where rank 0 called %s (every rank must call the same collectives, alike)",
				ErrMismatch, k, say(all[5*k:5*k+5]), say(all[:5]))
		}
	}
	return nil
}

// copyLocal copies src into dst (one rank's collective), unless they are
// the same memory; either may be empty (a non-root's Reduce).
func copyLocal(dst, src backend.Buffer) error {
	n := min(dst.Len(), src.Len())
	if n == 0 || dst.Ptr == src.Ptr {
		return nil
	}
	if dst.Mem == backend.Host {
		copy(dst.Bytes()[:n], src.Bytes()[:n])
		return nil
	}
	d := cuda.ByteView(uintptr(dst.Ptr), n, cuda.Device(dst.Device))
	s := cuda.ByteView(uintptr(src.Ptr), n, cuda.Device(src.Device))
	return cuda.CopyDevice(d, s)
}

// stagedColl runs a collective of device buffers over point-to-point
// messages through host copies: the send buffer is copied to the host,
// the collective runs there, and the result is copied back (where the
// transport does not move device memory device to device, or
// COURIER_DEVICE_COLL=staged; colldevice.go).
func (c *Comm) stagedColl(co backend.Coll) error {
	send, err := toHost(co.Send)
	if err != nil {
		return err
	}
	recv := send
	if co.Recv.Ptr != co.Send.Ptr || co.Recv.Count != co.Send.Count {
		// In place for Allgather and ReduceScatter, one lies inside the
		// other: the host copies do not, and the algorithms copy the
		// block across.
		recv = hostLike(co.Recv)
	}
	hc := co
	hc.Send, hc.Recv = send, recv
	if err := c.p2pColl(hc); err != nil {
		return err
	}
	if co.Recv.Count == 0 || co.Kind == backend.Exscan && c.rank == 0 {
		return nil // (Exscan leaves rank 0's receive buffer as it is)
	}
	dst := cuda.ByteView(uintptr(co.Recv.Ptr), co.Recv.Len(), cuda.Device(co.Recv.Device))
	if err := cuda.CopyToDevice(dst, recv.Bytes()); err != nil {
		return fmt.Errorf("copying the result to the device: %w", err)
	}
	return nil
}

// onHost runs f on send and recv, each staged through new host memory
// where it is in device memory: send is copied to the host before, recv
// back to the device after (f writes all of it). For the v-collectives
// of device buffers, where they are not run on the device.
func (c *Comm) onHost(send, recv backend.Buffer, f func(send, recv backend.Buffer) error) error {
	hs, hr := send, recv
	var err error
	if send.Mem == backend.Device {
		if hs, err = toHost(send); err != nil {
			return err
		}
	}
	if recv.Mem == backend.Device {
		hr = hostLike(recv)
	}
	if err := f(hs, hr); err != nil {
		return err
	}
	if recv.Mem != backend.Device || recv.Count == 0 {
		return nil
	}
	dst := cuda.ByteView(uintptr(recv.Ptr), recv.Len(), cuda.Device(recv.Device))
	if err := cuda.CopyToDevice(dst, hr.Bytes()); err != nil {
		return fmt.Errorf("copying the result to the device: %w", err)
	}
	return nil
}

// toHost copies a device buffer into new host memory of the same shape.
func toHost(b backend.Buffer) (backend.Buffer, error) {
	h := hostLike(b)
	if b.Count == 0 {
		return h, nil
	}
	src := cuda.ByteView(uintptr(b.Ptr), b.Len(), cuda.Device(b.Device))
	if err := cuda.CopyToHost(h.Bytes(), src); err != nil {
		return h, fmt.Errorf("copying the send buffer to the host: %w", err)
	}
	return h, nil
}

// hostLike returns new host memory of b's shape.
func hostLike(b backend.Buffer) backend.Buffer {
	h := backend.Buffer{Count: b.Count, Type: b.Type, Mem: backend.Host}
	if b.Count > 0 {
		mem := make([]uint64, (b.Len()+7)/8) // aligned for every element type
		h.Ptr = unsafe.Pointer(unsafe.SliceData(mem))
	}
	return h
}
