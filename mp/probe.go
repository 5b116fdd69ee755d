package mp

import (
	"fmt"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Iprobe reports, without blocking, whether a message from rank source
// (or AnySource) with tag (or AnyTag) has arrived that no receive has taken
// yet, and its status: who sent it, with which tag, and its count in
// elements of the type it was sent as, so the caller can size a buffer
// before receiving it. The message stays for the next matching receive.
//
// On the nccl backend it needs COURIER_CHECK=1 (the envelopes tell what is
// on the way) and a named source and tag; otherwise the error matches
// ErrNotSupported.
func Iprobe(c *Comm, source, tag int) (found bool, st Status, err error) {
	if err := c.checkPeer(source, tag, true); err != nil {
		return false, Status{}, c.opErr("probe", source, tag, err)
	}
	p, ok := c.conn.(backend.Prober)
	if !ok {
		return false, Status{}, c.opErr("probe", source, tag,
			fmt.Errorf("%w: the %s backend cannot probe for messages", ErrNotSupported, c.backendName))
	}
	found, bst, err := p.Iprobe(source, tag)
	return found, statusOf(bst), c.opErr("probe", source, tag, err)
}

// Probe blocks until a message from rank source (or AnySource) with tag
// (or AnyTag) has arrived, and returns its status as Iprobe does; the
// message stays for the receive. It is bounded by the communicator's
// timeout like every wait (when it passes, the communicator is aborted),
// and fails as soon as source is known to be gone with nothing from it
// waiting.
func Probe(c *Comm, source, tag int) (Status, error) {
	deadline := c.deadline()
	c.beginWait()
	defer c.endWait()
	for delay := time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		found, st, err := Iprobe(c, source, tag)
		if err != nil || found {
			return st, err
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return Status{}, c.opErr("probe", source, tag, c.abortTimedOut())
		}
		time.Sleep(delay)
	}
}
