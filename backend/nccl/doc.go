// Package nccl is courier's GPU transport: point-to-point messages between
// GPUs through NCCL, one GPU per rank.
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
//     travel over the host connection, so no user receive can take them.
//   - Device buffers (backend.Device) go to NCCL as they are; host buffers
//     are staged through page-locked memory with copies on the channel's
//     stream.
//   - A rank that closes, aborts or dies is noticed through the host
//     connection: operations with it end with ErrPeerLost (what it sent
//     before leaving can still be received).
//   - WaitOn makes a CUDA stream wait for a request on the GPU.
package nccl
