package nccl

import (
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// engine is what a communicator needs from NCCL and CUDA: issue a group of
// sends (or of receives) on one of its channels, tell when the group has
// reached the channel's stream and when it has finished, and copy memory.
// The real engine (device.go and the device_*.go files) drives libnccl
// and the cuda package; the tests drive the same communicator logic
// (queueing, grouping, completion, checks, failures) with a fake that
// models NCCL's matching in software.
//
// A channel is one direction between this rank and another: an NCCL
// communicator of two ranks, with its own CUDA stream, that carries only
// this rank's sends to that rank (channel sendChan(p)) or only its
// receives from it (recvChan(p)). See conn for why.
//
// The communicator calls every method with its mutex held, so an engine
// needs no locking of its own, and NCCL calls on one NCCL communicator are
// never concurrent.
type engine interface {
	// launch issues g's operations as one NCCL group on channel g.ch,
	// after queueing on its stream whatever the group needs first (copies
	// of host send buffers into device staging memory). inProgress
	// reports that NCCL answered ncclInProgress: the group is not on the
	// stream yet, and nothing else may be queued on the channel until
	// settle says so.
	launch(g *group) (inProgress bool, err error)
	// settle asks NCCL whether the last call on channel ch is still in
	// progress (ncclCommGetAsyncError); an error means the channel's
	// communicator failed.
	settle(ch int) (inProgress bool, err error)
	// seal queues what must follow g on its stream (copies of staged
	// receives back to pinned host memory) and g's seal (the write of its
	// number to the channel's completion word, or an event record). It is
	// called once g is on the stream.
	seal(g *group) error
	// poll reports, without blocking, whether g's seal has been reached.
	poll(g *group) (done bool, err error)
	// finish is called once g is done: it copies staged receives into the
	// user's host buffers and releases g's staging memory and event (if
	// any).
	finish(g *group)
	// release gives g's resources back without copying anything (g was
	// abandoned: its channel was aborted).
	release(g *group)
	// waitOn makes stream s wait, on the GPU, for g's seal.
	waitOn(g *group, s *cuda.Stream) error
	// follow makes channel ch's stream wait, on the GPU, for the work
	// queued on stream s so far: what is issued on the channel afterwards
	// starts after it.
	follow(ch int, s *cuda.Stream) error
	// copyBytes copies n bytes between any two buffers (host or device)
	// and returns when the copy is done: the data path of messages a rank
	// sends itself.
	copyBytes(dst, src unsafe.Pointer, n int64) error
	// allocTemp returns memory for an early message of n bytes (see
	// match.go), copyTemp copies the first n bytes of it into dst and
	// returns when done, and freeTemp takes it back.
	allocTemp(n int64) (*tempMem, error)
	copyTemp(dst backend.Buffer, t *tempMem, n int64) error
	freeTemp(t *tempMem)
	// detach takes channel ch's NCCL communicator out of the engine and
	// returns the call that aborts it (ncclCommAbort: the channel's work
	// on the device stops and the communicator is freed), or nil if the
	// channel has none. The call is made without the communicator's mutex,
	// and may run beside other engine methods; it returns within
	// abortBound, with an error matching errAbortStuck if NCCL had not
	// returned by then.
	detach(ch int) func() error
	// close ends every channel's communicator that is left, all at once,
	// with ncclCommAbort, then waits for the streams and frees them, the
	// events and the staging memory. Not ncclCommFinalize and
	// ncclCommDestroy: NCCL's finalize (which destroy runs when it was not
	// called) ends with a barrier of the communicator's ranks on a host, so
	// a rank that closes while its peer does not (or not yet) would wait
	// for it; abort skips it.
	close() error
}

// op is one send or receive of a group.
type op struct {
	// r is the request the op belongs to; nil for the ops that connect the
	// pairs of ranks when the communicator opens.
	r    *request
	recv bool
	peer int
	// buf is where the data comes from or goes: user memory (host or
	// device). Unused when scratch is set or addr is not 0.
	buf backend.Buffer
	// addr, when not 0, is the device address of the op's memory instead
	// of buf (the communicator's own buffers, such as those connectAll
	// exchanges).
	addr uintptr
	// typ and count describe what moves on the wire.
	typ   backend.DType
	count int64
	// scratch makes a receive land in throwaway device memory: the
	// message must be taken off the wire (NCCL delivers in order) but does
	// not fit the receive it reached.
	scratch bool
	// early is set for a receive that takes a message off the wire into
	// temporary memory before a receive has matched it (checked mode).
	early *inMsg
	// token: a message of no elements without checks moves one byte of
	// the engine's own memory, so that its receive completes only once it
	// was sent, as in MPI (count and typ say one byte).
	token bool
	// coll is set for a collective, on the channel of all ranks
	// (worldChan): buf is its send buffer and buf2 its receive buffer, in
	// the shapes backend.CollKind describes, redop and root as the kind
	// needs; typ and count are buf's.
	coll  backend.CollKind
	buf2  backend.Buffer
	redop backend.ReduceOp
	root  int
}

// bytes is the size of the data the op moves (a collective: its send
// buffer's).
func (o *op) bytes() int64 { return o.count * int64(o.typ.Size()) }

// group is the unit of issue: the operations one flush hands NCCL between
// ncclGroupStart and ncclGroupEnd, and the requests they complete.
type group struct {
	ch  int // the channel it runs on
	ops []op
	// launching: launch answered ncclInProgress and settle has not yet
	// said otherwise. At most one group per channel (its newest) is
	// launching.
	launching bool
	// sealed: the group is on the stream and its seal behind it.
	sealed bool
	// res is the engine's per-group state (seal, staging memory).
	res any
	// staged is the size of the host buffers of its operations (staged
	// through the engine's memory).
	staged int64
	// t0, t1, t2: when launch began and returned, and when the group was
	// sealed; nccl: how long NCCL's calls took in the launch; polls: how
	// often its seal was polled (only with COURIER_NCCL_TRACE).
	t0, t1, t2 time.Time
	nccl       time.Duration
	polls      int64
}

// reset empties g for reuse.
func (g *group) reset() {
	clear(g.ops)
	g.ops = g.ops[:0]
	g.ch, g.launching, g.sealed, g.res, g.staged = 0, false, false, nil, 0
	g.t0, g.t1, g.t2 = time.Time{}, time.Time{}, time.Time{}
	g.nccl, g.polls = 0, 0
}
