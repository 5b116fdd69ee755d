package nccl

import (
	"errors"
	"fmt"
	"os"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

func init() { backend.Register("nccl", Driver{}) }

// Driver opens NCCL communicators. It implements backend.Driver and
// backend.Availability.
type Driver struct{}

// notSupported turns a CUDA failure into the reason the backend is not
// available here.
func notSupported(err error) error {
	if errors.Is(err, backend.ErrNotSupported) {
		return fmt.Errorf("nccl: %w", err)
	}
	return fmt.Errorf("nccl: %w: CUDA does not work here: %w", backend.ErrNotSupported, err)
}

// gpus checks that CUDA works and returns the number of devices.
func gpus() (int, error) {
	if err := cuda.Init(); err != nil {
		return 0, notSupported(err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0, notSupported(err)
	}
	if n == 0 {
		return 0, fmt.Errorf("nccl: %w: no CUDA device", backend.ErrNotSupported)
	}
	return n, nil
}

// Available implements backend.Availability: nil when CUDA works, there is
// a GPU, and NCCL loads; otherwise an error matching
// backend.ErrNotSupported that says which is missing.
func (Driver) Available() error {
	if _, err := gpus(); err != nil {
		return err
	}
	_, err := loadLibrary(libraryPath(os.Getenv))
	return err
}
