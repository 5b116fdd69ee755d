package nccl

import (
	"sync/atomic"

	"github.com/courier-mp/courier/cuda"
)

// device is the real engine: one GPU, an NCCL communicator of two ranks
// and a CUDA stream per channel, a stream per other rank that its two
// channels share when they can (see pick), and the memory that stages
// host buffers.
//
// Device buffers go to NCCL as they are (zero copy). A host buffer is
// staged: a send's bytes are copied by the CPU into page-locked memory at
// launch and by the GPU into device staging memory, on the stream before
// the group; a receive lands in device staging memory, is copied by the
// GPU into page-locked memory on the stream after the group, and by the CPU
// into the user's slice when the group has finished (finish). Staging
// memory comes in slabs, one per group, kept for reuse and freed only by
// close (freeing device memory may wait for the device to be idle, which a
// pending receive prevents).
type device struct {
	lib   *library
	hooks *devHooks
	dev   cuda.Device
	rank  int       // this rank
	size  int       // ranks in the job
	comms []uintptr // by channel; 0 for none (this rank's own), and once aborted or destroyed
	// skip, by peer rank: the pair has no channels (its messages take the
	// IPC path); nil: every pair has them.
	skip    []bool
	streams []*cuda.Stream // by channel
	ops     cOps           // reused by every launch

	// The pair's shared stream (see pick): by peer rank, shared is the
	// stream (nil: none, each channel keeps to its own) and sharedLive
	// the number of groups on it not finished yet (all of one channel).
	// By channel: live, its groups launched and not finished; cur, the
	// stream of the last one launched; pinned, that follow ordered the
	// channel's own stream after a caller's stream, so that the next
	// launch must go there.
	shared     []*cuda.Stream
	sharedLive []int
	live       []int
	cur        []*cuda.Stream
	pinned     []bool

	events, allEvents []*cuda.Event        // free, and all made
	slabs, allSlabs   []*slab              // free, and all made
	staged            []*staged            // free per-group records
	temps             map[int64][]*tempMem // free temporary memory, by size
	allTemps          []cuda.Slice[byte]
	warm              cuda.Slice[byte] // 2N bytes: the connection buffers, then empty messages' tokens
	stuck             atomic.Bool      // an abort did not return within abortBound
	// blocking: the communicators are blocking ones (the default; see
	// BlockingEnv): a launch returns once the group is on the stream, and
	// first contact is made by connectBlocking.
	blocking bool
	// timed: launches measure the time NCCL's calls take (group.nccl), for
	// COURIER_NCCL_TRACE.
	timed bool

	// Completion words (see useFlags): when flags is set, each channel has
	// a word that its stream sets to a group's number once the group is
	// done. Without them, each group records an event that poll queries.
	flags    *flagWords
	after    after // launch's seal, reused (handed to C)
	waitedOn bool  // a stream was made to wait on a completion word (waitOn)
}

// staged is the device engine's record of a group: the stream it went
// on, its number on its channel (with completion words) or its event
// (without), its slab and the receives to copy out of the slab when it is
// done.
type staged struct {
	stream   *cuda.Stream
	onShared bool
	seq      uint64
	ev       *cuda.Event
	slab     *slab
	backs    []copyBack
}
