// Package nccl is courier's GPU transport: point-to-point messages between
// GPUs through NCCL, and, between ranks that share a GPU (which NCCL
// refuses), through CUDA IPC (ipc.go; COURIER_CUDA_IPC=0 refuses them
// instead).
//
// It is registered as "nccl"; programs reach it through package mp
// (COURIER_BACKEND=nccl, or "auto", which prefers it when a GPU and
// libnccl are present). libnccl.so.2 (or $COURIER_NCCL_LIBRARY) is loaded
// at run time, so the package builds and links everywhere; where NCCL or a
// GPU is missing, or in a build without cgo, Available and Open return an
// error matching backend.ErrNotSupported that says why.
//
// # What a rank gets
//
// Each rank uses one GPU: the one of its local rank ($COURIER_DEVICE
// overrides). Open makes a channel for each direction between this rank
// and every other: an NCCL communicator of two ranks with its own CUDA
// stream, connected before Open returns. It also opens a host connection
// (a tcp communicator) beside them, first, so that a rank that never comes
// is found before NCCL is involved. conn's documentation says why
// channels, and how operations move.
//
// The communicators are blocking ones by default: NCCL 2.28's non-blocking
// communicators hand every ncclGroupEnd to a thread of their own and cost
// about 4 ms per group, in C as from courier (docs/benchmarks.md), against
// a few microseconds. Every blocking call that waits for a peer (creation
// and first contact, in Open) runs on a goroutine of its own, bounded by
// Open's context: a peer that never answers makes Open fail rather than
// hang (the call itself is left behind). COURIER_NCCL_BLOCKING=0 selects
// non-blocking communicators, whose creation NCCL can abort.
//
// # Semantics
//
//   - Isend and Irecv queue; any Wait, Test or Done issues what is queued,
//     as one NCCL group per channel.
//   - Without checks, messages from one rank are received in the order
//     they were sent, whatever their tags (NCCL has none), and a receive
//     must ask for the message's exact size and type: NCCL silently cuts a
//     longer message short and never completes a receive of a shorter one.
//     This is the fast path: nothing but NCCL moves per message.
//   - With checks (Config.Check, COURIER_CHECK=1) every message's envelope
//     (sequence number, tag, element type, count) travels over the host
//     connection when its send is posted. Receives then match as in MPI
//     (the oldest message from the source with the tag), ask NCCL for
//     exactly the message, and a mismatch (ErrMismatch, ErrTruncate) names
//     both ranks, leaves the user's buffer alone and keeps the
//     communicator usable: the seed's 1000-element send into a 500-element
//     receive is an error, never garbage. Small unmatched messages are
//     received early, so blocking sends of them complete before their
//     receive is posted, as on the tcp backend.
//   - AnySource and AnyTag are ErrNotSupported.
//   - Messages to oneself are matched by tag in memory and copied (host or
//     device), never through NCCL; a send to oneself completes at once.
//   - Messages with negative tags (the library's own, such as mp.Barrier's)
//     travel over the host connection, so no user receive can take them;
//     in device memory between ranks that share a GPU, they take the IPC
//     path, which matches by tag (DeviceDirect: when every rank shares
//     this rank's GPU, package mp runs its collectives of device buffers
//     on the GPU over it).
//   - Device buffers (backend.Device) go to NCCL as they are; host buffers
//     are staged through page-locked memory with copies on the channel's
//     stream.
//   - A rank that closes, aborts or dies is noticed through the host
//     connection: operations with it end with ErrPeerLost (what it sent
//     before leaving can still be received).
//   - WaitOn makes a CUDA stream wait for a request on the GPU; IsendOn,
//     IrecvOn and CollectiveOn order an operation on the caller's stream
//     (the channel's stream waits for an event recorded on it, and it for
//     the operation), without a CPU wait.
//
// # Derived communicators
//
// Split (mp's Split and Dup) makes a communicator of this package in its
// own right over the members, by Open's phases: a host connection (the
// Split of this one's), and NCCL communicators created with
// ncclCommInitRank from unique IDs the members exchange over it: a channel
// for each direction between two members and, when this one has it, a
// communicator of all the members for the collectives. Nothing is shared
// with the parent's ordered channels, so traffic on one never blocks or
// reorders another's. Not ncclCommSplit: on the communicator of every
// rank it is collective over every rank of the parent, members or not
// (package mp calls Split on members only), on a channel it must not run
// beside the parent's own NCCL calls, and it needs NCCL 2.18. Channels
// made lazily on first use would put NCCL's creation, which waits for the
// peer, on the path of a send that must not wait. Split blocks until
// every member has called it (splitBound); each derived communicator has
// its own streams and staging memory. Every wait, test or Done issues
// what is queued on every communicator of the family (the world and
// those derived from it), so that a send queued on one never waits for a
// wait on that one. Close or Abort of the world ends the derived ones.
package nccl

// The files, one concern each. A message's way: Isend or Irecv (post.go)
// queues it; a Wait (wait.go), Test or Done issues the queue as one NCCL
// group per channel (launch.go, then device_launch.go and the C call in
// nccl_wrap.c); progress.go polls the groups until they are done
// (device_completion.go); match.go matches checked receives on arrival;
// failure.go and close.go end what is left.
//
// The communicator (conn), above the engine:
//
//	doc.go               the package doc and this map
//	conn.go              the communicator: its type and design, its queues and records of the other ranks, Pending
//	channel.go           channels: their numbers and names, and the communicator's record of each
//	post.go              posting: Isend, Irecv, and the library's own messages (negative tags)
//	wait.go              waiting: a request's wait, spinning and then sleeping
//	progress.go          progress: the progress goroutine, and polling the groups in flight until they are done
//	launch.go            launching: the queue built into groups, one per channel, and handed to the engine
//	match.go             matching in checked mode: receives and announced messages by tag, early messages, Iprobe, verdicts
//	self.go              messages a rank sends itself, matched and copied in memory
//	ipc.go               the IPC path: ranks that share a GPU, DESC and DONE on the host connection, matching, the copier
//	ipc_mem.go           the IPC path's memory side: exported regions, staging, the mapping cache, completion words
//	cancel.go            Cancel: a receive taken back before it matched or was issued
//	split.go             Split: derived communicators, made by Open's phases over the members, and their hellos
//	shrink.go            Revoke and Lost (Shrink): the host connection revoked, every channel failed; the survivors' communicator made by Split
//	family.go            the world and its derived communicators: flushed together, ended with the world
//	coll.go              Collective: NCCL's collectives on the communicator of every rank
//	waiton.go            the caller's CUDA streams: WaitOn, IsendOn, IrecvOn and CollectiveOn
//	failure.go           failure: a channel failed and aborted, a rank lost, Abort
//	close.go             Close
//	connect.go           first contact on every channel, and the background connection of the communicator of every rank
//	control.go           the host connection (a tcp communicator) and the envelopes it carries
//	request.go           a request's life: completion, Test, Wait, Done, Release
//	trace.go             COURIER_NCCL_TRACE: where each group's time goes, and Open's phases
//	tuning.go            the timing and size constants (docs/nccl-tuning.md says why each has its value)
//
// Opening:
//
//	driver.go            Driver: registration and Available
//	env.go               the environment variables that configure the backend, and their readers
//	open.go              Open, phase by phase, and this rank's own setup
//	hello.go             the hello each rank contributes to the exchange in Open
//	init.go              creating the NCCL communicators of the channels
//
// The engine, between the communicator and NCCL and CUDA:
//
//	engine.go            the engine interface, and the groups and operations it is handed
//	device.go            the real engine: its type, and its record of a group
//	device_launch.go     a group launched: host buffers staged, collectives laid out, the NCCL call
//	device_completion.go a group's end: completion words or events, settle, seal, poll, finish
//	device_streams.go    the streams: the one a pair of channels shares, and ordering after a caller's stream
//	device_memory.go     staging memory, temporary memory, events, and their free lists
//	device_connect.go    first contact with blocking communicators, and connecting the communicator of every rank
//	device_close.go      a channel's communicator aborted, and the engine closed
//	dtype.go             courier's element types and reductions as NCCL's
//	errors.go            NCCL's result codes as Go errors
//
// libnccl, and the C layer (only nccl_cgo.go, nccl_nocgo.go and the C files
// touch C):
//
//	library.go           libnccl: what the package needs of it (lib), and loading it once per process
//	nccl_cgo.go          the Go side of the C calls (cgo)
//	nccl_nocgo.go        the stand-in without cgo: every call says NCCL cannot be loaded
//	nccl_wrap.h          the C wrappers' declarations: one C call each, the device's context made current around it
//	nccl_wrap.c          the C wrappers: libnccl loaded with dlopen, its calls made
//	nccl_types.h         NCCL's types and codes, written down once, for the wrappers and the fake GPU
//
// The tests: nccl_test.go, conformance_test.go and coll_test.go run the
// communicator over a fake engine (fake_test.go) everywhere; fakegpu_test.go
// and fakegpu_ext_test.go run the real engine and C layer over a fake CUDA
// driver and NCCL (testdata/fakegpu.c); gpu_test.go needs GPUs;
// overhead_test.go, overhead_ext_test.go and share_test.go measure and check
// the communicator's own costs and the shared stream's rule; split_test.go
// checks derived communicators on the fake engine; collstream_ext_test.go
// checks the stream-ordered collectives through mp on the fake GPU and on
// GPUs; devreduce_test.go checks internal/devreduce's kernels against the
// host's on GPUs (and, in devcoll_fakegpu_test.go, the fake's twins of
// them), and devcoll_ext_test.go mp's collectives of device buffers on
// ranks that share the fake GPU: on the device, no copy through host
// memory; trace_ext_test.go checks the GPU times of mp's timeline
// (COURIER_TRACE) on the fake GPU and on GPUs.
