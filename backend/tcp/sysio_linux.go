package tcp

import "golang.org/x/sys/unix"

// ioctlHeld asks a socket how many bytes it holds to be read.
const ioctlHeld = unix.SIOCINQ
