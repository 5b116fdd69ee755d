// Package backend is the contract between package mp, which users import,
// and the transports that move messages (tcp, nccl).
//
// It plays the role database/sql/driver plays for database/sql: a
// transport implements Driver and registers itself by name (Register); mp
// picks a driver by the name in COURIER_BACKEND and talks to it only
// through the interfaces here. Users never need this package unless they
// write a transport. It imports no other package of courier but the leaf
// that holds the sentinel errors, so a transport depends on the contract
// alone.
//
// The semantics every transport must give are written down in mp's package
// documentation; the ones that shape this contract are:
//
//   - Isend and Irecv never block waiting for the peer. A transport may block
//     briefly (for example while a small frame is written to a socket whose
//     reader is alive), but never on the matching operation being posted.
//   - Messages from one sender with the same tag are matched in the order they
//     were sent (MPI's non-overtaking rule).
//   - Every request ends: with success, or with an error matching one of the
//     sentinels (errors.Is). A lost peer, Close and Abort end every
//     pending request; a peer that closed in order is reported with
//     ErrPeerClosed beside ErrPeerLost.
//
// # Optional interfaces
//
// Beyond Driver, Conn and Request, a transport may implement the
// interfaces below. Package mp finds each by a type assertion and, where a
// transport lacks one, does without:
//
//   - [Availability], on a Driver: whether the driver can work on this
//     machine, and why not. mp skips an unavailable driver for
//     COURIER_BACKEND=auto and reports why when it is named. Without it,
//     the driver is taken to be available.
//   - [Prober], on a Conn: Iprobe, a message that has arrived before a
//     receive takes it (mp's Iprobe and Probe). Without it, they report
//     ErrNotSupported, as a Prober does for a probe it cannot answer.
//   - [Collectives], on a Conn: collectives the transport runs itself. An
//     error matching [ErrSkip] hands one back, and mp runs it over
//     point-to-point messages, as it does without the interface.
//   - [CollRunner], on a Conn with Collectives: a blocking collective run
//     on the caller's goroutine, with no request when it ends at once
//     (the shared-memory collectives). Without it, mp starts the
//     collective with Collective and waits for its request.
//   - [DeviceConn], on a Conn: the GPU the communicator is bound to (mp's
//     Comm.Device). Without it, mp chooses as [PickDevice] does.
//   - [StreamConn], on a Conn: sends and receives ordered on a CUDA
//     [Stream] (mp's IsendOnStream and IrecvOnStream). Without it, mp
//     synchronizes the stream and sends or receives with Isend or Irecv.
//   - [StreamCollectives], on a Conn: collectives ordered on a CUDA
//     [Stream] (mp's IallreduceOnStream and the other …OnStream
//     collectives). Without it, or with [ErrSkip], mp synchronizes the
//     stream and runs the collective as a blocking one.
//   - [StreamWaiter], on a Request: a CUDA stream made to wait for the
//     operation on the GPU (mp's Request.WaitOn). Without it, or with an
//     error matching ErrNotSupported, mp waits for the operation on the CPU.
//   - [Canceler], on a Request: a receive canceled before it matches (mp's
//     Request.Cancel). Without it, mp's Cancel reports ErrNotSupported and
//     the receive goes on.
//   - [Splitter], on a Conn: communicators derived from it over the same
//     connections, each with its own matching (mp's Comm.Split and
//     Comm.Dup). Without it, they report ErrNotSupported: mp has no
//     fallback that could keep two communicators' messages apart.
//   - [Shrinker], on a Conn: revoking it and listing the ranks it has
//     lost (mp's Comm.Shrink, which agrees over tag ShrinkTag on the
//     revoked Conn and then calls Split). Without it, Shrink reports
//     ErrNotSupported.
//
// # Files
//
//	backend.go   the core: Buffer, Status, Request, OpInfo, Conn, Config, Job,
//	             Exchanger, Driver; the Availability, Prober, Canceler,
//	             Splitter and Shrinker capabilities; ShrinkTag
//	dtype.go     DType, the element types
//	coll.go      the collectives: CollKind, ReduceOp, Coll, Collectives,
//	             CollRunner, ErrSkip
//	device.go    the GPU side: PickDevice, Stream, DeviceConn, StreamWaiter,
//	             StreamConn, StreamCollectives
//	errors.go    the sentinel errors (internal/errs's values), ErrPeerClosed and LostError
//	registry.go  Register, Lookup, Drivers
package backend
