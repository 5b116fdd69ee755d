// Package mp is courier's message passing API: MPI-style point-to-point
// messages and collectives between the ranks of a job, for Go programs.
//
// A program calls Init; it reads the launcher's environment (courier
// run, mpirun, mpiexec, srun, torchrun, flux run, jsrun, or
// COURIER_RANK/SIZE/ADDR set by hand) and
// COURIER_BACKEND, meets the other ranks and returns a *Comm:
//
//	comm, err := mp.Init(ctx)
//	if err != nil { … }
//	defer comm.Close()
//
// (Init may be called again, for another communicator over the same
// ranks, if every rank does so; see Init.) Package mp/mptest runs several
// ranks in one test, for a program's own tests.
//
// Send, Recv, Isend, Irecv and Sendrecv are generic over the buffer: any
// slice of a Go integer, float or complex type, or of Float16/BFloat16. The
// element type and count come from the slice; counts are 64-bit; an empty
// slice is a valid zero-length message.
//
// # Semantics
//
// Matching: a receive matches on (source, tag), in the order receives were
// posted; AnySource and AnyTag are wildcards (AnyTag matches every tag a
// user can send, never the library's own messages). Messages from one
// sender with one tag are never overtaken.
//
// Completion: blocking calls return when the buffer may be reused. Isend
// and Irecv return a *Request; its buffer belongs to the library until
// Wait, Test, WaitAll, WaitAny, WaitSome, TestAll or TestAny report
// completion. Request.Cancel takes back a receive no message has matched
// yet: it completes with ErrCanceled and the message goes to the next
// matching receive; a matched receive completes normally, and a send cannot
// be canceled (ErrNotSupported). Operations
// posted before a wait are in progress together, so exchanges that are
// valid MPI (both ranks Isend and Irecv, then wait) never deadlock. Sending
// to one's own rank works, blocking or not.
//
// Checks: the element types of sender and receiver must agree (compared as
// the types that travel: Go's int is int64 on 64-bit platforms, uint and
// uintptr are uint64); a message larger than the receive buffer is
// ErrTruncate, and then Status.Count is the message's count, so the caller
// can size a buffer. With COURIER_CHECK=1 the counts must be equal too.
// Errors name both ranks. The receiver always gets the error; the sender of
// a large message (one that waits for the receive: over 64 KiB on TCP) gets
// it as well, a small one has already completed.
//
// Failure: a lost peer, Close and Abort end every pending request with an
// error (ErrPeerLost, ErrClosed, ErrAborted); COURIER_TIMEOUT (or
// WithTimeout) bounds every wait, and a wait that passes it aborts the
// communicator with an error listing this rank's pending operations and
// where each was called. Without a timeout, a watchdog (COURIER_WATCHDOG,
// DefaultWatchdog by default; 0 or off disables it) writes that list once
// to standard error when the communicator's waits have made no progress
// for its period, and the waits go on: this report is the only thing the
// package ever writes to standard error. Under courier run, --timeout and
// Ctrl-C have every rank's list printed by courier run before the ranks are
// stopped, with the job's wait-for graph; and a wait that passes its
// timeout there has every rank's list printed before it aborts (over an
// inherited control channel, COURIER_CONTROL_FD; no signal handler is
// installed).
//
// The error of a lost peer names the rank that was
// lost (*OpError's LostRank): the rank that died, also where the peer of the
// operation only left after it lost that rank (a survivor that closed in
// the cascade says so as it leaves).
//
// Receives from AnySource on host and tcp (as in MPI's fault-tolerance
// proposal, ULFM, with MPI_ERR_PROC_FAILED_PENDING): when a rank fails, the
// wildcard receives pending at that moment end with ErrPeerLost naming it,
// since the message they wait for may have been its; when none is pending,
// the next one that finds no message waiting ends so, at once. Each
// failure is reported to a wildcard once. A program that goes on re-posts
// the receive:
//
//	for {
//		st, err := mp.Recv(comm, buf, mp.AnySource, tag)
//		if oe, ok := errors.AsType[*mp.OpError](err); ok && errors.Is(err, mp.ErrPeerLost) {
//			if lost, ok := oe.LostRank(); ok {
//				forget(lost) // hand its work to another rank
//				continue     // and post the receive again
//			}
//		}
//		…
//	}
//
// Wildcard receives posted after that match messages from the ranks that
// live, as before; once no other rank is left that could send (each
// failed, or closed its communicator), a wildcard receive that finds no
// message ends with ErrPeerLost at once. A rank that closes its
// communicator in order (everything it sent was delivered) ends no
// wildcard receive while others live.
//
// Survivors go on without a lost rank with Comm.Shrink:
// every survivor calls it after ErrPeerLost; it revokes the communicator
// at every member (their operations on it end with ErrRevoked, which
// matches ErrPeerLost, so none waits for a rank that went on to Shrink),
// agrees with the others over the links that still work on who is alive,
// also when more ranks die meanwhile, and returns a communicator of them
// in their old order. The old one is then good for nothing but Close.
// See docs/reliability.md for the agreement.
//
// Errors are *OpError values wrapping the sentinels (ErrTruncate,
// ErrMismatch, ErrPeerLost, …) that errors.Is matches. The package never
// panics, logs or exits on a user error.
//
// Message calls take no context.Context: to stop work from another
// goroutine, select on req.Done() beside ctx.Done() and call comm.Abort.
//
// # Collectives
//
// Barrier, Bcast, Reduce, Allreduce, Allgather, ReduceScatter and Alltoall
// take part of every rank: each rank calls the same ones in the same
// order. The reductions combine element by element with Sum, Prod, Min or
// Max, on every element type (Min and Max not on complex numbers). They
// run in place where the buffers say so (Allreduce(c, x, x, Sum)). On
// nccl, NCCL runs them on a communicator of every rank, device buffers
// directly; on host, ranks all on one host run the small ones through
// shared memory; on tcp, for larger sizes, and for what NCCL lacks
// (int16, uint16, products of complex numbers), courier runs them over
// point-to-point messages that never mix with the program's own. With checks (COURIER_CHECK=1) the
// ranks compare each collective before it runs, and a rank that calls it
// differently is named in an ErrMismatch on every rank.
//
// Gather, Scatter, Scan and Exscan, and the v-forms Gatherv, Scatterv,
// Allgatherv and Alltoallv (blocks of a length per rank, in rank order,
// counts in elements), complete MPI's set; they run over point-to-point
// messages on every backend (NCCL has none of them; device buffers as
// under GPUs below). Bad counts fail with ErrInvalid on every rank before
// any block moves: in Gatherv and Scatterv the root sends its
// counts (and whether they are valid) to the others first, Allgatherv's
// counts are the same on every rank, and Alltoallv's ranks exchange each
// pair's counts first.
//
// # Non-blocking collectives
//
// Ibarrier, Ibcast, Ireduce, Iallreduce, Iallgather, IreduceScatter and
// Ialltoall start a collective and return a *Request at once; it goes on
// while the program computes (a goroutine of the communicator runs it, or
// the transport does) and completes with Wait, Test, WaitAll, WaitAny,
// TestAny, WaitSome or WaitOn, as a point-to-point request does. Every
// rank starts the collectives, blocking and not, in the same order;
// several may be in flight; the buffers are the library's until the
// request completes. Each gives the bits its blocking form gives. Cancel
// on one is ErrNotSupported; Close ends those in flight with ErrClosed.
//
// # Sub-communicators
//
// Comm.Split(color, key) partitions a communicator as MPI_Comm_split does:
// the ranks that pass one color form a new communicator, ranked by key
// (ties by their old rank); a negative color (Undefined) joins none and
// gets nil, nil. Comm.Dup copies one. Both are collective over the
// communicator they are called on (an all-gather of colors and keys) and
// may be applied to derived communicators again (the rows and columns of
// a grid, a split of a split). A derived *Comm has its own Rank and Size,
// its own tag space and its own collectives: its messages never match,
// block or reorder another communicator's, AnySource and AnyTag included,
// so any program that is valid MPI with several communicators is valid
// here. OpError's Rank and Peer are ranks in the communicator of the call,
// and OpError.Comm (Comm.Name: "split 1 of world") says which one.
//
// A derived communicator shares the world's connections. Its Close ends
// its own operations with ErrClosed and tells its other members, whose
// operations with this rank there end with ErrPeerLost (and
// ErrPeerClosed); everything else goes on, the communicators derived from
// it too. Closing the world ends every communicator derived from it (their
// operations end with ErrClosed; their Close returns at once); a lost peer
// fails its operations in every communicator, each naming it by its rank
// there. A wait that passes the timeout aborts only the communicator it
// waited on. On the host backend a derived communicator's collectives run
// over point-to-point messages (the shared-memory collectives serve the
// world). Every backend has sub-communicators; on nccl a derived
// communicator has NCCL communicators of its own, its collectives among
// them (see Split).
//
// # Go values
//
// SendValue, RecvValue and BcastValue carry any Go value encoding/gob
// can encode (structs, maps, slices, nested): the receiver needs no size
// in advance, and a value that cannot be encoded is ErrEncode on both
// sides. BytesOf views a slice of plain structs (no pointers, strings,
// slices, maps, interfaces) as bytes, without a copy, for the message
// calls that take buffers.
//
// # GPUs
//
// A cuda.Slice (device memory from cuda.Alloc, on the GPU Comm.Device
// names) goes wherever a slice goes. With COURIER_BACKEND=nccl device
// buffers move without a copy and host buffers are staged through pinned
// memory; on tcp, device buffers are staged through host memory: one
// program, either backend, the same results. On nccl a receive must name
// its source and tag (AnySource and AnyTag are ErrNotSupported), messages
// from one rank arrive in the order they were sent whatever their tags,
// and COURIER_CHECK=1 makes the receiver compare each message's tag, type
// and count with the sender's before the data moves (a mismatch is an
// error naming both ranks). Request.WaitOn makes a CUDA stream wait for an
// operation on the GPU; IsendOnStream and IrecvOnStream order a message on
// a stream, as if it were a kernel queued there, and IbcastOnStream,
// IreduceOnStream, IallreduceOnStream, IallgatherOnStream,
// IreduceScatterOnStream and IalltoallOnStream a collective: a training
// step queues its backward kernels, the gradients' all-reduce and the
// optimizer's kernels on one stream, and the CPU waits for none of them
// (see IallreduceOnStream).
//
// The collectives courier runs over point-to-point messages (all of them
// where NCCL makes no communicator of every rank, as for ranks that share
// a GPU; Gather, Scatter, Scan, Exscan and the v-forms everywhere) take
// device buffers on the GPU where the transport moves device memory
// device to device (on nccl, every rank on one GPU, through CUDA IPC):
// the copies, the combining (kernels that give internal/reduce's bits)
// and the scratch memory stay on the GPU. Elsewhere, or with
// COURIER_DEVICE_COLL=staged, device buffers are staged through host
// memory, once each way.
//
// # Timeline
//
// With COURIER_TRACE=FILE (or WithTrace), every rank records a span for
// each message call and each collective it makes (its peer, tag, bytes,
// when it was called and when it completed, the line that called it),
// and the spans the program marks itself with Comm.Trace and
// Comm.TraceOnStream; the world's Close writes them to the rank's file as
// Chrome trace-event JSON, for Perfetto or chrome://tracing, and courier
// trace merges the ranks' files onto one clock and draws them. Spans on a
// stream (the …OnStream calls, TraceOnStream) are timed by CUDA events on
// the GPU. A rank keeps its newest 131,072 spans. Without the variable
// nothing is recorded, each call's test costs one branch, and nothing is
// allocated. See docs/trace.md.
package mp
