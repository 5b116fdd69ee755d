//go:build !linux

package tcp

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: TCP_USER_TIMEOUT is Linux's. A link
// partitioned with data in flight then ends when the kernel gives up
// retransmitting; an idle one when its keep-alive probes go unanswered.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
