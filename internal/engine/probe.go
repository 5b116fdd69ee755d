package engine

import "github.com/courier-mp/courier/backend"

// Iprobe implements backend.Prober: the oldest message that arrived from
// source with tag and that no receive has taken. A message from a rank
// that is gone is still reported; when none is waiting, a probe of that
// rank fails with why it is gone. Transports that can be polled are
// polled once first.
func (e *Engine) Iprobe(source, tag int) (bool, backend.Status, error) {
	for _, p := range e.pollers {
		p.Poll()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fatal != nil {
		return false, backend.Status{}, e.fatal
	}
	for _, m := range e.unexpected {
		if m.recv == nil && matches(source, tag, m.src, m.tag) {
			return true, backend.Status{Source: m.src, Tag: m.tag, Count: m.count}, nil
		}
	}
	if source >= 0 && source < e.size && source != e.rank {
		if err := e.usable(e.peers[source]); err != nil {
			return false, backend.Status{}, err
		}
	}
	if source == backend.AnySource {
		if err := e.wildUsable(); err != nil {
			return false, backend.Status{}, err // no rank is left that could send
		}
	}
	return false, backend.Status{}, nil
}
