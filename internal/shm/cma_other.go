//go:build !linux

package shm

// ReadFrom copies from another process's memory; it needs Linux
// (process_vm_readv). Here it returns an error wrapping ErrNotSupported.
func ReadFrom(pid int, local []byte, remote uintptr) (int, error) {
	return 0, notSupported("process_vm_readv")
}

// WriteTo copies into another process's memory; it needs Linux
// (process_vm_writev). Here it returns an error wrapping ErrNotSupported.
func WriteTo(pid int, remote uintptr, local []byte) (int, error) {
	return 0, notSupported("process_vm_writev")
}

// CanReadFrom reports whether single-copy transfers work with pid; here
// they never do: it returns an error wrapping ErrNotSupported.
func CanReadFrom(pid int, probeAddr uintptr) error {
	return notSupported("process_vm_readv")
}
