package engine

import (
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Device buffers travel over host links through host memory: a send copies the
// device buffer to a host buffer before it starts (so the device buffer
// may be reused as soon as Isend returns, as for any send that has
// completed its copy); a receive lands in a host buffer, and the copy to
// the device happens when the caller first observes completion (Wait or
// Test), before it gets the buffer back.

// deviceView is the device memory a buffer describes.
func deviceView(b backend.Buffer) cuda.Slice[uint8] {
	return cuda.ByteView(uintptr(b.Ptr), b.Len(), cuda.Device(b.Device))
}

// stageOut copies a device buffer to a new host buffer of the same shape.
func stageOut(b backend.Buffer) (backend.Buffer, error) {
	host := make([]byte, b.Len())
	if len(host) > 0 {
		if err := cuda.CopyToHost(host, deviceView(b)); err != nil {
			return backend.Buffer{}, err
		}
	}
	return hostBuffer(host, b), nil
}

// hostBuffer describes host memory with b's element type and count.
func hostBuffer(host []byte, b backend.Buffer) backend.Buffer {
	out := backend.Buffer{Count: b.Count, Type: b.Type, Mem: backend.Host}
	if len(host) > 0 {
		out.Ptr = unsafe.Pointer(unsafe.SliceData(host))
	}
	return out
}

// stagedRecv is a receive into device memory: the transport fills host,
// and the first observation of completion copies host to the device.
type stagedRecv struct {
	backend.Request
	dev  backend.Buffer
	host []byte

	once sync.Once
	err  error
}

func (s *stagedRecv) finish(st backend.Status, err error) (backend.Status, error) {
	s.once.Do(func() {
		n := min(int64(len(s.host)), st.Count*int64(s.dev.Type.Size()))
		if err != nil || n <= 0 {
			return
		}
		dst, e := deviceView(s.dev).Sub(0, n)
		if e == nil {
			e = cuda.CopyToDevice(dst, s.host[:n])
		}
		s.err = e
	})
	if err == nil {
		err = s.err
	}
	return st, err
}

// Test implements backend.Request.
func (s *stagedRecv) Test() (bool, backend.Status, error) {
	done, st, err := s.Request.Test()
	if !done {
		return false, st, err
	}
	st, err = s.finish(st, err)
	return true, st, err
}

// Wait implements backend.Request.
func (s *stagedRecv) Wait(timeout time.Duration) (backend.Status, error) {
	st, err := s.Request.Wait(timeout)
	if errors.Is(err, backend.ErrTimeout) {
		return st, err
	}
	return s.finish(st, err)
}
