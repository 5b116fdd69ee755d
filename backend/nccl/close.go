package nccl

import (
	"errors"

	"github.com/courier-mp/courier/backend"
)

// Close implements backend.Conn. Pending operations end with ErrClosed,
// and every later one fails with it. The host connection says goodbye to
// the other ranks and waits (up to the tcp backend's linger time) for
// theirs; then every channel is aborted (ncclCommAbort, all at once: see
// engine.close for why not ncclCommFinalize), which also stops whatever
// was still on the GPU, so no buffer is used after Close returns. The
// communicator's goroutines have ended when Close returns. Close of the
// communicator Open made closes those derived from it first (their later
// Close returns at once).
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		for _, d := range c.fam.derived(c) {
			if err := d.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		c.mu.Lock()
		c.closing = true
		if c.fatal == nil {
			c.fatal = backend.ErrClosed
		}
		for i := range c.chans {
			// Closed, not failed: engine.close aborts them all at once.
			if c.chans[i].err == nil {
				c.chans[i].err = c.fatal
			}
		}
		c.failAllLocked(c.fatal)
		c.mu.Unlock()
		if c.ctl != nil {
			if err := c.ctl.close(); err != nil {
				errs = append(errs, err)
			}
		}
		close(c.stop)
		if err := c.stopWarm(); err != nil {
			errs = append(errs, err)
		}
		c.wg.Wait()
		if c.ipc != nil {
			if c.ipc.endShare != nil {
				c.ipc.endShare()
			}
			if c.ipc.stopWatch != nil {
				c.ipc.stopWatch()
			}
			if err := c.ipc.mem.close(); err != nil {
				errs = append(errs, err)
			}
		}
		c.aborts.wait()
		if err := c.eng.close(); err != nil {
			errs = append(errs, err)
		}
		c.fam.leave(c)
		c.closeErr = errors.Join(errs...)
		if c.trace != nil {
			c.trace.report(c.rank)
		}
	})
	return c.closeErr
}
