package tcp

import (
	"net"
	"strings"

	"golang.org/x/sys/unix"
)

// unpace takes a connection between two ranks of this host off a
// congestion control that paces its segments (BBR), onto one that does
// not (CUBIC, else Reno); it leaves every other connection as the system
// set it, and reports whether it changed tc.
//
// Why: a loopback connection has no congestion to control, and BBR, the
// system default on some hosts, paces a flow at the rate it has measured
// so far. A frame one byte over the segment size leaves a short segment
// that waits out the pacing timer: on the 2-core Intel machine of
// docs/benchmarks.md ("The host path on an Intel 2-core machine", 2026-12-06) a
// stream of 64 KiB messages (65,576 bytes a frame, against a segment of
// 65,483) moved 1.3-1.5 GB/s under BBR and 2.8 under CUBIC, and a
// payload of 65,443 bytes (a frame of one segment) 2.8-3.4 under BBR;
// 1 MiB messages 2.9 against 5.4 GB/s. Open MPI's TCP moved 3.0 and 4.6
// GB/s under BBR, 3.0 and 5.6 under CUBIC. Links between hosts keep the
// system's choice: there pacing is what BBR is for.
//
// The kernel lets an unprivileged process choose among the algorithms
// of net.ipv4.tcp_allowed_congestion_control (CUBIC and Reno where they
// are built); one it refuses leaves the connection as it was.
func unpace(tc *net.TCPConn) bool {
	if !onThisHost(tc.LocalAddr(), tc.RemoteAddr()) {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	changed := false
	rc.Control(func(fd uintptr) {
		cc, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if err != nil || !paces(cc) {
			return
		}
		for _, alt := range []string{"cubic", "reno"} {
			if unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, alt) == nil {
				changed = true
				return
			}
		}
	})
	return changed
}

// paces reports whether the congestion control named cc paces its
// segments by itself (without a pacing queue discipline).
func paces(cc string) bool {
	// unix.GetsockoptString stops at the kernel's NUL padding; a name read
	// otherwise may still carry it.
	switch strings.TrimRight(cc, "\x00") {
	case "bbr", "bbr2", "bbr3":
		return true
	}
	return false
}

// onThisHost reports whether a connection from local to remote stays on
// this host: both ends on loopback, or both on the same address.
func onThisHost(local, remote net.Addr) bool {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	return l.IP.IsLoopback() && r.IP.IsLoopback() || l.IP.Equal(r.IP)
}
