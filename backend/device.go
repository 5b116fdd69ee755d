package backend

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceEnv names the variable that picks a rank's GPU (an ordinal)
// instead of its local rank.
const DeviceEnv = "COURIER_DEVICE"

// PickDevice chooses the GPU of the rank cfg describes among the n of its
// host: $COURIER_DEVICE, else the local rank (else the rank, when the
// launcher does not say) modulo n, so that a host with more ranks than
// GPUs puts them on its GPUs in turn (ranks that share a GPU meet through
// CUDA IPC on the nccl backend). Every backend that uses a GPU, and mp's
// Comm.Device, choose with it. The error matches ErrInvalid.
func PickDevice(cfg Config, n int) (int, error) {
	if s := strings.TrimSpace(cfg.Getenv(DeviceEnv)); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 0 || d >= n {
			return 0, fmt.Errorf("%w: %s=%q: want a device ordinal in [0, %d)", ErrInvalid, DeviceEnv, s, n)
		}
		return d, nil
	}
	if n < 1 {
		return 0, fmt.Errorf("%w: this host has no GPU", ErrInvalid)
	}
	lr := cfg.Job.LocalRank
	if lr < 0 {
		lr = cfg.Job.Rank // the launcher gives no local rank
	}
	return lr % n, nil
}

// The GPU side of the contract: optional capabilities of a transport that
// moves device memory on the GPU itself (nccl). Package mp finds each by a
// type assertion and, where a transport lacks one, does without: it picks
// the GPU itself, waits for a message on the CPU, or synchronizes the
// stream and sends through the host.

// Stream is a CUDA stream as it crosses the contract. Package backend
// imports no package of courier but its sentinels' leaf (not cuda either),
// so the stream is opaque here: package mp passes a *cuda.Stream, which
// implements Stream. A transport built on package cuda asserts it back
// (s.(*cuda.Stream)) to queue work on it; one that reaches CUDA or NCCL
// from C passes Handle to them.
type Stream interface {
	// Handle returns the CUstream; 0 for a nil or destroyed stream, which
	// a transport refuses with ErrInvalid (to CUDA, 0 would mean the
	// legacy default stream).
	Handle() uintptr
}

// DeviceConn is an optional Conn capability: a communicator bound to one
// GPU says which. Package mp's Comm.Device reports it; without it, mp
// chooses as PickDevice does.
type DeviceConn interface {
	// Device returns the ordinal of the communicator's GPU.
	Device() int
}

// StreamWaiter is an optional Request capability: the GPU can wait for
// the operation, so the CPU need not (mp's Request.WaitOn).
//
// WaitOn makes stream s wait, on the GPU, until the operation has
// completed: work queued on s after the call runs after the message has
// left the send buffer or arrived in the receive buffer. It blocks the CPU
// at most until the operation is on the GPU. It does not complete the
// request: Test or Wait still must, and they report its errors (including
// those a GPU-side wait cannot see). It returns the operation's error at
// once if the operation has already failed, and nil if it has already
// succeeded. For an operation the GPU cannot wait for (a receive into host
// memory, a message a rank sends itself), it returns an error matching
// ErrNotSupported, and package mp waits on the CPU instead.
type StreamWaiter interface {
	WaitOn(s Stream) error
}

// StreamConn is an optional Conn capability: messages ordered on the
// caller's stream, as if the transfer were a kernel queued on it (mp's
// IsendOnStream and IrecvOnStream).
//
// IsendOn and IrecvOn post a send or a receive that starts, on the GPU,
// after the work queued on s before the call; the work queued on s after
// the call starts once the send buffer may be reused or the message is in
// the receive buffer. The CPU does not wait for the transfer. The request
// still reports completion and errors through Test and Wait. Package mp
// calls them with device buffers, a named peer and a tag (no wildcards),
// and a live stream; a buffer or stream the transport cannot order on s
// is an error matching ErrInvalid. Without this capability, mp
// synchronizes s and sends or receives through Isend or Irecv.
type StreamConn interface {
	IsendOn(buf Buffer, dest, tag int, caller uintptr, s Stream) (Request, error)
	IrecvOn(buf Buffer, source, tag int, caller uintptr, s Stream) (Request, error)
}

// StreamCollectives is an optional Conn capability: collectives ordered on
// the caller's stream, as if the collective were a kernel queued on it
// (mp's IallreduceOnStream and the other …OnStream collectives).
//
// CollectiveOn starts collective c so that, on the GPU, it begins after
// the work queued on s before the call, and the work queued on s after
// the call begins once this rank's part is done (c.Recv holds the result,
// c.Send may be overwritten). The CPU does not wait for the collective:
// the call returns once it is on the GPU. The request still reports
// completion and errors through Test and Wait. Package mp calls it as it
// calls Collectives.Collective (in the collectives' order, checks done,
// more than one rank, something to move) with device buffers and a live
// stream on their device. A buffer or stream the transport cannot order on
// s is an error matching ErrInvalid; a collective it does not run itself
// (see Collectives) is ErrSkip, and package mp then synchronizes s and
// runs it as a blocking collective, as it does without this capability.
type StreamCollectives interface {
	CollectiveOn(c Coll, s Stream) (Request, error)
}

// DeviceDirect is an optional Conn capability: a transport that moves
// device buffers between this rank and every other from device memory to
// device memory, with no copy through host memory on the way, for the
// library's own messages (negative tags) as for the program's (the nccl
// backend, when every rank shares this rank's GPU: the CUDA IPC path).
//
// Package mp then runs the collectives it runs itself (those a
// transport's Collectives leaves to it) on device buffers where they lie:
// its point-to-point algorithms, with their copies and combining on the
// GPU. Without it, or while DeviceDirect reports false, mp copies device
// buffers to host memory once, runs the algorithms there and copies the
// result back: fewer copies than sending device memory message by message
// through a transport that stages every message through the host.
type DeviceDirect interface {
	// DeviceDirect reports whether every message of device memory to or
	// from any other rank, whatever its tag, moves device to device. It
	// does not change over the communicator's life, and every rank of
	// the communicator reports the same.
	DeviceDirect() bool
}
