//go:build !linux

package shm

import (
	"fmt"
	"net"

	"github.com/courier-mp/courier/backend"
)

// peerPid: the shared-memory transport is Linux's (it needs memfd and the
// peer's credentials); elsewhere the host backend uses TCP.
func peerPid(*net.UnixConn) (int, error) {
	return 0, fmt.Errorf("%w: shared memory between ranks needs Linux", backend.ErrNotSupported)
}

// closeFds: no descriptors are received here.
func closeFds([]int) {}
