package mp

// SetShrinkSent sets the hook Shrink calls after each decision a rank
// passes on (nil: none), for the tests that kill a rank mid-agreement.
func SetShrinkSent(f func(c *Comm, to int)) { shrinkSent = f }
