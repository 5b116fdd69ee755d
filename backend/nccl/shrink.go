package nccl

import (
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// Shrink (backend.Shrinker: package mp's Comm.Shrink).
//
// The agreement runs over the host connection, which is a tcp
// communicator of the same ranks and a Shrinker itself: Revoke revokes it,
// which tells the other ranks; there, the host connection's revoke ends
// the envelope readers' receives (control.go), and each reader reports its
// rank lost with the revoke's error (peerLost), which fails and aborts the
// channels to it and the communicator of every rank, as a rank's loss
// does. Here Revoke fails every channel at once. The agreement's messages
// (tag backend.ShrinkTag, host memory) go over the host connection, as
// every negative tag does, AnySource included; Lost is the host
// connection's, whose links say who is gone (the channels' records count
// every rank that revoked as lost). Split then makes the survivors'
// communicator from scratch, as it makes any (new NCCL communicators over
// the members only); it is not held back by the revoke, which sets no
// fatal error.

// Revoke implements backend.Shrinker.
func (c *conn) Revoke(cause int) {
	if c.ctl != nil {
		if sh, ok := c.ctl.tc.(backend.Shrinker); ok {
			sh.Revoke(cause)
		}
	}
	err := fmt.Errorf("nccl: %w: %w: this rank began Shrink on it", backend.ErrPeerLost, backend.ErrRevoked)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revoked != nil || c.fatal != nil || c.closing {
		return
	}
	c.revoked = err
	c.failAllLocked(err)
	c.kick()
}

// Lost implements backend.Shrinker: the ranks the host connection has
// lost (its links ended, or, on a derived communicator, they left it).
func (c *conn) Lost() []int {
	if c.ctl == nil {
		return nil
	}
	if sh, ok := c.ctl.tc.(backend.Shrinker); ok {
		return sh.Lost()
	}
	return nil
}

// revokedFor returns why an operation with tag cannot start on a
// communicator this rank revoked, or nil; under c.mu.
func (c *conn) revokedForLocked(tag int) error {
	if tag == backend.ShrinkTag {
		return nil
	}
	return c.revoked
}
