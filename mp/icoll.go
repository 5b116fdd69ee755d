package mp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Non-blocking collectives. Each starts a collective and returns at once
// with a *Request; the collective goes on while the caller computes (no
// call into mp is needed for it to progress), and Wait, Test, WaitAll,
// WaitAny, TestAny, WaitSome and (on GPUs) WaitOn complete it as they
// complete a point-to-point request. MPI's rules hold: every rank starts
// the collectives of a communicator, blocking and non-blocking, in the
// same order, with the same arguments as the blocking forms take; several
// may be in flight at once and complete in any order the program waits
// for them; and the buffers belong to the library (neither read nor
// written by the program) until the request has completed. Argument
// errors (a root out of range, buffers of the wrong length) are returned
// at once, before anything starts, with a nil *Request; every other error
// reaches the request's Wait. The Status of a collective request is zero.
//
// How they run. A goroutine of the communicator runs each one as its
// blocking form would (the same path and algorithm, so the results are
// bit for bit the same): on the transport where it runs the collective
// itself (nccl; shared memory on the host backend), else over
// point-to-point messages. WaitOn waits on the CPU (the stream then waits
// for nothing more). The
// collectives of one rank run one at a time in their start order, the
// blocking ones waiting their turn behind the non-blocking ones started
// before them: their messages share one tag, so two at once could match
// each other's. The goroutine exists only while collectives are queued;
// Close waits for it, and collectives queued when Close is called end with
// ErrClosed (the one running ends as every pending request does).
//
// Wait on such a request is bounded by the communicator's timeout, as
// every wait is (timeout.go): a collective that does not finish in time
// aborts the communicator, and the request ends with ErrTimeout. Cancel
// returns ErrNotSupported and the collective goes on.
//
// Cost: a non-blocking collective over point-to-point allocates its
// Request and a job (with its channel), three small allocations, plus
// what the algorithm allocates (nothing in steady state, as for the
// blocking forms), and the worker goroutine when none is running. The
// blocking forms
// stay at zero allocations.

// Ibarrier starts a barrier: the request completes when every rank has
// started it.
//
//go:noinline
func Ibarrier(c *Comm) (*Request, error) {
	if c == nil {
		return nil, c.opErr("ibarrier", -1, -1, invalidf("nil *Comm"))
	}
	return c.startColl(backend.Coll{Kind: backend.Barrier, Caller: callerPC()}, -1)
}

// Ibcast starts a Bcast of root's buf to every other rank's buf.
//
//go:noinline
func Ibcast[B Buffer](c *Comm, buf B, root int) (*Request, error) {
	b := describe(buf)
	return c.icollective(backend.Coll{Kind: backend.Bcast, Send: b, Recv: b, Root: root, Caller: callerPC()})
}

// Ireduce starts a Reduce of every rank's send with op into recv at root.
//
//go:noinline
func Ireduce[B Buffer](c *Comm, send, recv B, op Op, root int) (*Request, error) {
	return c.icollective(backend.Coll{Kind: backend.Reduce, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Root: root, Caller: callerPC()})
}

// Iallreduce starts an Allreduce of every rank's send with op into every
// rank's recv.
//
//go:noinline
func Iallreduce[B Buffer](c *Comm, send, recv B, op Op) (*Request, error) {
	return c.icollective(backend.Coll{Kind: backend.Allreduce, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()})
}

// Iallgather starts an Allgather of every rank's send into every rank's
// recv, rank k's at block k.
//
//go:noinline
func Iallgather[B Buffer](c *Comm, send, recv B) (*Request, error) {
	return c.icollective(backend.Coll{Kind: backend.Allgather, Send: describe(send), Recv: describe(recv), Caller: callerPC()})
}

// IreduceScatter starts a ReduceScatter: every rank's send combined with
// op, block k of the result into rank k's recv.
//
//go:noinline
func IreduceScatter[B Buffer](c *Comm, send, recv B, op Op) (*Request, error) {
	return c.icollective(backend.Coll{Kind: backend.ReduceScatter, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()})
}

// Ialltoall starts an Alltoall: block k of send to rank k, rank j's block
// into block j of recv.
//
//go:noinline
func Ialltoall[B Buffer](c *Comm, send, recv B) (*Request, error) {
	return c.icollective(backend.Coll{Kind: backend.Alltoall, Send: describe(send), Recv: describe(recv), Caller: callerPC()})
}

// icollNames are the operation names of the non-blocking collectives'
// errors, by kind.
var icollNames = [...]string{backend.Bcast: "ibcast", backend.Reduce: "ireduce", backend.Allreduce: "iallreduce",
	backend.Allgather: "iallgather", backend.ReduceScatter: "ireducescatter", backend.Alltoall: "ialltoall",
	backend.Barrier: "ibarrier"}

// icollName is the operation name of a non-blocking collective of kind k.
func icollName(k backend.CollKind) string {
	if int(k) < len(icollNames) && icollNames[k] != "" {
		return icollNames[k]
	}
	return "i" + k.String()
}

// icollective validates a non-blocking collective and starts it.
func (c *Comm) icollective(co backend.Coll) (*Request, error) {
	peer := -1
	if co.Kind.Rooted() {
		peer = co.Root
	}
	if err := c.checkColl(&co); err != nil {
		return nil, c.opErr(icollName(co.Kind), peer, -1, err)
	}
	return c.startColl(co, peer)
}

// collOrder keeps the collectives of one rank in their start order: a
// ticket lock (each collective takes the next ticket when it starts and
// runs when served reaches it) and the queue of non-blocking collectives
// that its worker goroutine runs. The zero value is ready.
//
// A blocking collective that finds nothing else started (the common case:
// one goroutine calling collectives one after another) takes its turn by
// one compare-and-swap of fast instead, and gives it back by another: the
// mutex, the tickets and the condition cost a dozen atomic instructions a
// call, each of which waits until this core's stores (the shared-memory
// collective's last, to lines another core reads) have left it. fast is
// orderFree (no collective holds the turn or waits for it, no ticket is
// out), orderFast (a blocking collective holds it by the fast path),
// orderFastWanted (that, and tickets were taken behind it) or
// orderTickets (the tickets decide, until every ticket is served). The
// fast path's two compare-and-swaps (orderFree to orderFast and back) are
// its only moves outside mu.
type collOrder struct {
	fast           atomic.Int32
	mu             sync.Mutex
	cond           sync.Cond // served moved, or the queue grew
	issued, served uint64
	queue          []*collJob // non-blocking collectives to run, in ticket order
	worker         bool       // a worker goroutine is draining queue
	closed         bool
	wg             sync.WaitGroup // the worker
}

// The states of collOrder.fast.
const (
	orderFree       = 0
	orderFast       = 1
	orderFastWanted = 2
	orderTickets    = -1
)

// take returns the next ticket; o.mu is held. It moves the order to
// the tickets: a collective holding the turn by the fast path then holds
// a ticket of its own, the one served now, which it serves when it gives
// the turn back (collUnlock).
func (o *collOrder) take() uint64 {
	if o.cond.L == nil {
		o.cond.L = &o.mu
	}
	for {
		switch o.fast.Load() {
		case orderFree:
			if !o.fast.CompareAndSwap(orderFree, orderTickets) {
				continue
			}
		case orderFast:
			if !o.fast.CompareAndSwap(orderFast, orderFastWanted) {
				continue
			}
			o.issued++ // the fast holder's
		}
		break
	}
	t := o.issued
	o.issued++
	return t
}

// await waits until ticket t is served; o.mu is held.
func (o *collOrder) await(t uint64) {
	for o.served != t {
		o.cond.Wait()
	}
}

// collLock waits for the turn of a blocking collective started now (behind
// every collective started before it, blocking or not); pc is the
// program's call, which its messages report.
// span is the collective's on the timeline (0: none), which notes when
// its turn came.
func (c *Comm) collLock(pc uintptr, call uint32, span uint64) {
	o := &c.order
	if !o.fast.CompareAndSwap(orderFree, orderFast) {
		o.mu.Lock()
		o.await(o.take())
		o.mu.Unlock()
	}
	c.collPC = pc
	if c.collCall.Load() != call { // a store is an exchange: only a change
		c.collCall.Store(call)
	}
	if span != 0 {
		c.traceTurn(span)
	}
}

// collUnlock ends the turn of the collective holding it.
func (c *Comm) collUnlock() {
	o := &c.order
	if o.fast.CompareAndSwap(orderFast, orderFree) {
		return
	}
	o.mu.Lock()
	if o.fast.Load() == orderFastWanted {
		// Held by the fast path when another collective came (take):
		// the tickets decide from now on, this turn's first.
		o.fast.Store(orderTickets)
	}
	o.serve()
	o.mu.Unlock()
}

// serve ends the turn of the ticket being served: the next one's comes,
// and, once every ticket is served (no collective holds the turn or
// waits for it), the fast path may take the turn again; o.mu is held.
func (o *collOrder) serve() {
	o.served++
	if o.served == o.issued && o.fast.Load() == orderTickets {
		o.fast.Store(orderFree)
	}
	o.cond.Broadcast()
}

// collJob is a non-blocking collective run by the communicator's worker,
// and the transport request its Request holds.
type collJob struct {
	co     backend.Coll
	ticket uint64
	done   chan struct{} // closed when err is set
	err    error
	span   uint64 // on the timeline (trace.go); 0: none
}

// Test reports whether the collective has completed.
func (j *collJob) Test() (bool, backend.Status, error) {
	select {
	case <-j.done:
		return true, backend.Status{}, j.err
	default:
		return false, backend.Status{}, nil
	}
}

// Wait waits for the collective, at most timeout when it is positive.
func (j *collJob) Wait(timeout time.Duration) (backend.Status, error) {
	if timeout <= 0 {
		<-j.done
		return backend.Status{}, j.err
	}
	select {
	case <-j.done:
		return backend.Status{}, j.err
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-j.done:
		return backend.Status{}, j.err
	case <-t.C:
		return backend.Status{}, fmt.Errorf("%w: %s waited %v", ErrTimeout, icollName(j.co.Kind), timeout)
	}
}

// Done is closed when the collective completes.
func (j *collJob) Done() <-chan struct{} { return j.done }

// Release does nothing: a job is not reused.
func (j *collJob) Release() {}

// startColl starts a validated non-blocking collective on the
// communicator's worker. peer is its root (-1: none).
func (c *Comm) startColl(co backend.Coll, peer int) (*Request, error) {
	name := icollName(co.Kind)
	o := &c.order
	j := &collJob{co: co}
	if traceOn.Load() {
		j.span = c.traceColl(uint32(co.Kind)|collNonblocking, &co)
	}
	req := &Request{c: c, op: name, peer: peer, tag: -1, coll: true}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, c.traceEnd(j.span, c.opErr(name, peer, -1, fmt.Errorf("%w: the communicator is closed", ErrClosed)))
	}
	j.ticket = o.take()
	o.queue = append(o.queue, j)
	j.done = make(chan struct{})
	req.r = j
	if !o.worker {
		o.worker = true
		o.wg.Add(1)
		go c.collWorker()
	}
	o.mu.Unlock()
	return req, nil
}

// collWorker runs the queued non-blocking collectives in ticket order, each
// in its turn, and returns when the queue is empty.
func (c *Comm) collWorker() {
	o := &c.order
	defer o.wg.Done()
	o.mu.Lock()
	for len(o.queue) > 0 {
		j := o.queue[0]
		if o.served != j.ticket {
			// Its turn has not come (a blocking collective, or one that
			// goes in front of it, runs): wait, and look at the front again.
			o.cond.Wait()
			continue
		}
		o.queue[0] = nil
		o.queue = o.queue[1:]
		closed := o.closed
		o.mu.Unlock()
		var err error
		if closed {
			err = fmt.Errorf("%w: the communicator was closed before the collective ran", ErrClosed)
		} else {
			c.collPC = j.co.Caller
			c.collCall.Store(uint32(j.co.Kind) | collNonblocking)
			if j.span != 0 {
				c.traceTurn(j.span)
			}
			err = c.runJob(j.co)
		}
		if j.span != 0 {
			c.traceDone(j.span, Status{}, err)
		}
		j.err = err
		close(j.done)
		o.mu.Lock()
		o.serve()
	}
	o.queue = o.queue[:0]
	o.worker = false
	o.mu.Unlock()
}

// runJob runs a validated collective in its turn.
func (c *Comm) runJob(co backend.Coll) error {
	if co.Kind == backend.Barrier {
		_, err := c.runBarrier()
		return err
	}
	return c.runColl(co)
}

// closeColl marks the communicator closed for the collectives: none
// starts any more, and those queued end with ErrClosed. waitColl then
// waits for the worker, after the transport has been closed (so the one
// running ends).
func (c *Comm) closeColl() {
	c.order.mu.Lock()
	c.order.closed = true
	c.order.mu.Unlock()
}

// waitColl waits for the worker goroutine to return.
func (c *Comm) waitColl() { c.order.wg.Wait() }
