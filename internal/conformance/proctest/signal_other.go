//go:build !unix

package proctest

import "os"

// stopSignal is what Launch sends a rank that outlives the job's limit.
var stopSignal = os.Kill
