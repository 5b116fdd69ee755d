package engine

import "github.com/courier-mp/courier/backend"

// Iprobe implements backend.Prober: the oldest message of the
// communicator that arrived from source with tag and that no receive has
// taken. A message from a rank that is gone is still reported; when none
// is waiting, a probe of that rank fails with why it is gone. Transports
// that can be polled are polled once first.
func (c *Comm) Iprobe(source, tag int) (bool, backend.Status, error) {
	e := c.e
	if err := c.revokedFor(tag); err != nil {
		return false, backend.Status{}, err
	}
	for _, p := range e.pollers {
		p.Poll()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := c.usable(nil, source); err != nil {
		return false, backend.Status{}, err
	}
	for _, m := range c.unexpected {
		if m.recv == nil && matches(source, tag, m.src, m.tag) {
			return true, backend.Status{Source: m.src, Tag: m.tag, Count: m.count}, nil
		}
	}
	if source >= 0 && source < c.size && source != c.rank {
		if err := c.usable(c.peer(source), source); err != nil {
			return false, backend.Status{}, err
		}
	}
	if source == backend.AnySource {
		if err := c.wildUsable(); err != nil {
			return false, backend.Status{}, err // no rank is left that could send
		}
	}
	return false, backend.Status{}, nil
}
