package backend

import (
	"context"
	"os"
	"time"
	"unsafe"
)

// AnySource and AnyTag are the wildcards a receive may use for its source
// and tag. A transport that cannot match them reports ErrNotSupported.
const (
	AnySource = -1
	AnyTag    = -1
)

// MaxTag is the largest tag a message may carry. Tags are non-negative.
const MaxTag = 1<<31 - 1

// MemKind says where a buffer's memory lives.
type MemKind uint8

const (
	// Host memory: a Go slice (or pinned host memory), addressable by the CPU.
	Host MemKind = iota
	// Device memory: GPU memory, not addressable by the CPU.
	Device
)

// Buffer describes the memory of one message: a pointer, an element count
// and an element type. Ptr keeps a Go-allocated backing array alive for as
// long as the Buffer is reachable; a transport holds the Buffer (not a bare
// uintptr) while an operation on it is pending.
type Buffer struct {
	// Ptr is the address of the first element; nil when Count is 0. For
	// device memory it holds the device address (a CUdeviceptr), which Go
	// never dereferences and which lies outside the Go heap.
	Ptr unsafe.Pointer
	// Count is the number of elements (64-bit: messages over 2^31 elements are valid).
	Count int64
	// Type is the element type.
	Type DType
	// Mem says whether Ptr is host or device memory.
	Mem MemKind
	// Device is the ordinal of the GPU that holds device memory.
	Device int
}

// Len is the buffer's size in bytes.
func (b Buffer) Len() int64 { return b.Count * int64(b.Type.Size()) }

// Bytes returns host memory as a byte slice. It returns nil for an empty
// buffer and for device memory, which the CPU cannot address.
func (b Buffer) Bytes() []byte {
	if b.Mem != Host || b.Ptr == nil || b.Count == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.Ptr), b.Len())
}

// Status describes a completed receive: who sent the message, with which
// tag, and how many elements of the receive buffer's type it held. For a
// completed send, Source is the sender's own rank, Tag the send's tag and
// Count the number of elements sent.
type Status struct {
	Source int
	Tag    int
	Count  int64
}

// Request is one pending non-blocking operation of a transport.
//
// Test and Wait may be called from any goroutine; after either has reported
// completion, the caller calls Release exactly once and never touches the
// request again, so transports can recycle request memory.
type Request interface {
	// Test reports, without blocking, whether the operation has completed,
	// and if so its status and error.
	Test() (done bool, st Status, err error)
	// Wait blocks until the operation completes. A positive timeout bounds
	// the wait: when it passes, Wait returns an error matching ErrTimeout and
	// the operation is still pending.
	Wait(timeout time.Duration) (Status, error)
	// Done returns a channel that is closed when the operation completes.
	Done() <-chan struct{}
	// Release hands the request back to the transport after its completion
	// has been observed. Release of a request that has not completed does
	// nothing (the transport still uses it; it is left to the garbage
	// collector), so a mistaken early Release cannot hand one request to
	// two operations.
	Release()
}

// OpInfo describes a pending operation, for reports made when a wait times
// out or a communicator is aborted.
type OpInfo struct {
	Op     string // "send" or "recv", or a collective a transport runs itself ("allreduce (shared memory)")
	Peer   int    // destination or source (AnySource for a wildcard receive); for a collective, the rank it waits for (-1: none)
	Tag    int
	Count  int64
	Type   DType
	Caller uintptr // program counter of the user's call, 0 if unknown
}

// Conn is one rank's endpoint of a communicator opened by a Driver.
//
// Every method is safe for concurrent use.
type Conn interface {
	// Isend starts sending buf to rank peer with tag.
	Isend(buf Buffer, peer, tag int, caller uintptr) (Request, error)
	// Irecv starts receiving into buf from rank peer (or AnySource) with
	// tag (or AnyTag).
	Irecv(buf Buffer, peer, tag int, caller uintptr) (Request, error)
	// Pending lists the operations not yet completed.
	Pending() []OpInfo
	// Abort ends every pending and future operation with err (wrapped so
	// that it still matches err) and releases the transport's resources
	// without waiting for peers. It may be called more than once; the first
	// error is kept.
	Abort(err error)
	// Close ends the communicator in an orderly way: pending operations end
	// with ErrClosed, peers are told this rank left, and every goroutine the
	// transport started has returned when Close returns. Close is idempotent.
	Close() error
}

// Config is what a Driver needs to open a communicator. Package mp fills
// it from the bootstrap (package bootstrap finds the job and connects the
// exchange); a transport reads nothing else of the launch.
type Config struct {
	// Job is this process's place in the launch: rank, size, local rank,
	// the job's key and rank 0's address.
	Job Job
	// Exchange is the bootstrap's all-gather, already connected; the driver
	// uses it to publish its own addresses (or, for NCCL, the unique ID) and
	// learn the others'. It is closed by the caller after Open returns.
	Exchange Exchanger
	// Check asks for envelope checks on every message (COURIER_CHECK=1).
	Check bool
	// Timeout is the communicator's bound on every wait (COURIER_TIMEOUT or
	// mp.WithTimeout; zero: none), as package mp decided it. mp applies it
	// to the waits of messages itself; a driver may use it to bound its own
	// waits during Open and Close (zero: the driver's default).
	Timeout time.Duration
	// Env looks up configuration variables (COURIER_IFACE, …); nil means
	// the process environment.
	Env func(string) string
}

// Job is what a transport knows of the launch: where this process stands
// among the ranks and how the ranks tell their job from another's.
type Job struct {
	// Rank is this process's rank, in [0, Size).
	Rank int
	// Size is the number of ranks.
	Size int
	// LocalRank is the rank among the processes on this host (it picks
	// the GPU, see PickDevice); -1 when the launcher does not say.
	LocalRank int
	// Key is the secret (or, without one, the identity) every rank of the
	// job shares: a transport's connections prove it, so that a process of
	// another job is refused.
	Key string
	// Addr is host:port of rank 0's rendezvous. A transport uses it to
	// choose the interface it listens on (the one that reaches rank 0);
	// "" when the launch has none.
	Addr string
}

// Exchanger is the all-gather a Driver uses during Open, before it has
// connections of its own, to trade small blobs (addresses, an NCCL
// unique ID) with the other ranks. Package bootstrap's Exchanger is one.
type Exchanger interface {
	// AllGather contributes data (at most 1 MiB) and returns every rank's
	// contribution, indexed by rank. Every rank must call it the same
	// number of times.
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
}

// getenv reads the process environment.
var getenv = os.Getenv

// Getenv looks a variable up through c.Env, or the process environment.
func (c Config) Getenv(name string) string {
	if c.Env != nil {
		return c.Env(name)
	}
	return getenv(name)
}

// Driver opens communicators of one transport.
type Driver interface {
	// Open joins the communicator described by cfg. It returns when every
	// rank is connected, or with an error when ctx ends first.
	Open(ctx context.Context, cfg Config) (Conn, error)
}

// Availability is an optional Driver capability: a driver that may not work
// on this machine (no GPU, no library) reports why. mp uses it to choose a
// backend for COURIER_BACKEND=auto.
type Availability interface {
	// Available returns nil when the driver can open communicators here, or
	// an error matching ErrNotSupported that says why not.
	Available() error
}

// Prober is implemented by connections that can report a message that has
// arrived (or been announced) before a receive takes it, as MPI_Iprobe.
// Iprobe reports, without blocking, whether a message from source (or
// AnySource) with tag (or AnyTag) is waiting, and its status: the count is
// in elements of the type it was sent as. The message stays for a receive.
// A connection that cannot know returns an error matching ErrNotSupported.
type Prober interface {
	Iprobe(source, tag int) (found bool, st Status, err error)
}

// Sender is implemented by connections that can finish some sends at once,
// without a Request: a message the transport takes whole (a small one,
// copied into a ring or onto a socket), so that a blocking send is one
// call. Send either handles the send, and reports true with the send's
// error (nil: sent, buf may be reused), or leaves it untouched and
// reports false (nil error), and the caller starts it with Isend. It
// never waits for the receiver. mp's blocking Send uses it where a Conn
// has it.
type Sender interface {
	Send(buf Buffer, peer, tag int, caller uintptr) (handled bool, err error)
}

// Canceler is implemented by requests whose operation can be canceled
// before it matches, as MPI_Cancel for a receive.
//
// Cancel of a receive that no message has matched yet takes it off the
// transport's queues and completes it with an error matching ErrCanceled
// (Test and Wait report it; the caller then Releases the request as after
// any completion); the message it would have taken is left for the next
// matching receive. Cancel of a receive that has matched (its data may be
// moving) or completed does nothing: the request completes as it would
// have. Both return nil; the request's result says which happened. Cancel
// of a send, or of an operation the transport cannot cancel, returns an
// error matching ErrNotSupported and leaves the operation untouched.
// Cancel may be called from any goroutine, before the request is
// Released, and more than once.
type Canceler interface {
	Cancel() error
}

// Splitter is an optional Conn capability: communicators derived from this
// one (package mp's Comm.Split and Comm.Dup), over the same connections.
//
// Split returns this rank's endpoint of the communicator id over the ranks
// members of this Conn, listed in the new communicator's rank order (rank
// k of the new one is rank members[k] here; this rank is among them).
// Package mp has agreed on id and members with the other ranks first (an
// all-gather over this Conn), and every member calls Split with the same
// arguments, right after that all-gather; ranks that are not members do
// not call it. The host transports neither communicate nor block in Split
// (members may call it at different times: a message for the new
// communicator that arrives before this rank has made it is kept for it);
// a transport may instead set the new communicator up with the other
// members (nccl creates its NCCL communicators there), and then blocks
// until every member has called Split, within a bound of its own. id is
// never 0 and is not reused within the process.
//
// The new Conn's ranks are its own: Isend, Irecv, Status, OpInfo and
// errors speak of ranks in it. Its messages never match, block or reorder
// another communicator's, AnySource and AnyTag included. Its Close and
// Abort end its own operations and tell the other members (their
// operations with this rank on it end with ErrPeerLost), and leave this
// Conn and the other derived ones working; Close or Abort of the Conn the
// transport opened (and the loss of a peer) ends the derived ones too. A
// derived Conn may implement Splitter itself (a split of a split) and the
// other optional interfaces; mp finds them on it as on any Conn. A
// transport without Splitter makes mp's Split and Dup fail with an error
// matching ErrNotSupported.
type Splitter interface {
	Split(id uint32, members []int) (Conn, error)
}

// ShrinkTag is the tag of package mp's Shrink agreement: the messages it
// sends on a communicator that it has revoked ([Shrinker]). No program's
// message carries it (tags are non-negative) and AnyTag never matches it.
const ShrinkTag = -4

// Shrinker is an optional Conn capability: what package mp's Comm.Shrink
// needs to agree with the members that live on who they are, over the
// connections that still work, and to make a communicator of them.
//
// Revoke ends every pending and future operation on this Conn, but those
// with tag ShrinkTag, with an error matching ErrRevoked and ErrPeerLost,
// and tells every other member it can reach, which revokes the Conn there
// (and tells the others in its turn): a program that waits, on any rank,
// for a rank that has gone on to Shrink stops waiting. The connections
// stay up; messages with tag ShrinkTag still go between the members, and
// Splitter's Split (which a Shrinker also implements) still derives
// communicators from the revoked Conn. cause, when it is a rank of this
// Conn that was lost, is named (a LostError) in the error the others' operations end
// with; -1 when none. Revoke may be called more than once; the first
// call does it.
//
// Lost lists, in increasing order, the ranks of this Conn that it knows
// are gone: their process or connection was lost, or (on a derived Conn)
// they closed or aborted it. A rank that revoked the Conn is not gone.
type Shrinker interface {
	Splitter
	Revoke(cause int)
	Lost() []int
}

// Reporter is an optional Conn capability: asking the other ranks of the
// job, over this Conn's own connections, what they are waiting for, when
// a wait has passed its timeout and every rank may be blocked. Package mp
// uses it to put every rank's pending operations, and the wait-for graph
// they make, in the error of the wait that timed out, when no launcher's
// control channel does it (courier run's).
//
// SetReport sets the function whose result this rank sends a rank that
// asks: it is given the largest answer the connection carries and should
// fit it (a longer one is cut); it runs on a goroutine of the transport's,
// while the program's own goroutines may be blocked. nil answers with an
// empty report. AskReports asks every other rank it can reach and returns
// the answers that came within timeout, by rank; it never fails: a rank
// that cannot be reached, or does not answer in time, is missing.
type Reporter interface {
	SetReport(report func(max int) []byte)
	AskReports(timeout time.Duration) map[int][]byte
}
