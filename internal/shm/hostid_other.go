//go:build !linux

package shm

// HostID identifies what processes can share memory; it needs Linux. Here
// it returns an error wrapping ErrNotSupported.
func HostID() (string, error) {
	return "", notSupported("host id")
}
