//go:build !linux

package launch

// deaths would record the order in which the ranks die; without pidfds
// the launcher goes by the order in which it reaps them.
type deaths struct{}

func newDeaths() *deaths                   { return nil }
func (*deaths) add(rank, pid int) bool     { return false }
func (*deaths) order(rank int) (int, bool) { return 0, false }
func (*deaths) watching(rank int) bool     { return false }
func (*deaths) notified() <-chan struct{}  { return nil }
func (*deaths) close()                     {}
