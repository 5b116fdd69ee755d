package shm

import "unsafe"

// probe is the pattern CanReadFrom reads from a peer, at the address the
// peer's ProbeAddr gave. It is a variable, so it lives in the process's
// writable data at an address fixed for its lifetime; nothing writes it.
var probe = [16]byte{'c', 'o', 'u', 'r', 'i', 'e', 'r', '/', 's', 'h', 'm', ' ', 'p', 'r', 'o', 'b'}

// ProbeAddr returns the address, in this process, of a small buffer that
// holds a fixed pattern: a process publishes it to its peers at setup
// (with its pid), and each peer calls CanReadFrom with it to learn whether
// single-copy transfers (ReadFrom, WriteTo) work between them, before any
// message needs them.
func ProbeAddr() uintptr {
	return uintptr(unsafe.Pointer(&probe))
}
