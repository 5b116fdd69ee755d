//go:build unix && !linux

package tcp

// ioctlHeld asks a socket how many bytes it holds to be read: FIONREAD,
// _IOR('f', 127, int) on the BSDs and macOS (x/sys/unix does not name it).
const ioctlHeld = 0x4004667f
