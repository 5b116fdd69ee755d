package nccl

import (
	"fmt"
	"time"
)

// sendChan and recvChan are the channels that carry this rank's sends to,
// and receives from, rank p.
func sendChan(p int) int { return 2 * p }
func recvChan(p int) int { return 2*p + 1 }

// chanPeer returns the rank at the other end of channel ch (size, for the
// channel of all ranks).
func chanPeer(ch int) int { return ch / 2 }

// worldChan is the channel of the collectives in a job of size ranks: an
// NCCL communicator of every rank, after the two channels of each rank.
func worldChan(size int) int { return 2 * size }

// chanOf returns the channel of request r.
func chanOf(r *request) int {
	if r.coll != 0 {
		return worldChan(r.c.size)
	}
	if r.recv {
		return recvChan(r.peer)
	}
	return sendChan(r.peer)
}

// channel is the communicator's record of one channel.
type channel struct {
	inflight []*group // issued, not yet finished, in stream order
	// err is set once the channel's NCCL communicator is gone (aborted):
	// operations on it fail with err.
	err error
	// graceUntil: the channel's peer is gone and the channel has work on
	// the GPU; if none of it finishes by then, the channel is aborted.
	graceUntil time.Time
	// sinceCheck counts polls since ncclCommGetAsyncError was last asked.
	sinceCheck int
}

// launching reports whether the channel's newest group is still being
// launched (ncclInProgress): nothing may be issued on it until it is not.
func (ch *channel) launching() bool {
	n := len(ch.inflight)
	return n > 0 && ch.inflight[n-1].launching
}

// channelPeer is the NCCL rank of the other end of channel ch: on the
// channel to a rank this rank is NCCL rank 0 and the peer rank 1; on the
// channel from it, the other way round (see initComms).
func channelPeer(ch int) int {
	if ch == recvChan(chanPeer(ch)) {
		return 0
	}
	return 1
}

// chanName names channel ch of a job of size ranks, for errors.
func chanName(ch, size int) string {
	switch {
	case ch == worldChan(size):
		return "the communicator of every rank"
	case ch%2 == 1:
		return fmt.Sprintf("the channel from rank %d", chanPeer(ch))
	}
	return fmt.Sprintf("the channel to rank %d", chanPeer(ch))
}
