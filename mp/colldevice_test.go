package mp

import (
	"errors"
	"sync"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// directConn is the in-memory transport (collmem_test.go) that says it
// moves device memory device to device (backend.DeviceDirect) when
// direct, and records the memory of every buffer it is given.
type directConn struct {
	*memConn
	direct bool
	mu     sync.Mutex
	mems   []backend.MemKind
}

func (c *directConn) DeviceDirect() bool { return c.direct }

// note records b's memory and returns what the in-memory transport
// moves instead: host memory of b's shape for device memory (whose bytes
// no test reads).
func (c *directConn) note(b backend.Buffer) backend.Buffer {
	c.mu.Lock()
	c.mems = append(c.mems, b.Mem)
	c.mu.Unlock()
	if b.Mem == backend.Device {
		b = hostLike(b)
	}
	return b
}

func (c *directConn) Isend(b backend.Buffer, peer, tag int, pc uintptr) (backend.Request, error) {
	return c.memConn.Isend(c.note(b), peer, tag, pc)
}

func (c *directConn) Irecv(b backend.Buffer, peer, tag int, pc uintptr) (backend.Request, error) {
	return c.memConn.Irecv(c.note(b), peer, tag, pc)
}

// fakeDevice is a buffer of n bytes of "device memory" at an address no
// one dereferences: a Bcast of it on the device path only hands it to
// the transport (which moves host memory in its place).
func fakeDevice(n int64) backend.Buffer {
	p := uintptr(1 << 40)
	return backend.Buffer{Ptr: *(*unsafe.Pointer)(unsafe.Pointer(&p)), Count: n, Type: backend.Uint8, Mem: backend.Device}
}

// TestDeviceCollChoice: a collective of device buffers that mp runs
// itself goes to the transport as device memory (the algorithms on the
// device) where the transport says DeviceDirect, or COURIER_DEVICE_COLL
// says direct; otherwise, or where it says staged, no device buffer
// reaches the transport (the collective is staged through host memory,
// which needs CUDA for its copies: without it, it fails with
// ErrNotSupported before any message).
func TestDeviceCollChoice(t *testing.T) {
	for _, tc := range []struct {
		direct   bool
		mode     devCollMode
		onDevice bool
	}{
		{true, devCollAuto, true},
		{true, devCollStaged, false},
		{false, devCollAuto, false},
		{false, devCollDirect, true},
	} {
		comms := memComms(2, 0)
		conns := make([]*directConn, 2)
		for r, c := range comms {
			conns[r] = &directConn{memConn: c.conn.(*memConn), direct: tc.direct}
			c.conn, c.devMode = conns[r], tc.mode
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Go(func() {
				errs[r] = c.collective(backend.Coll{Kind: backend.Bcast, Send: fakeDevice(64), Recv: fakeDevice(64)})
			})
		}
		wg.Wait()
		for r, c := range conns {
			dev := 0
			for _, m := range c.mems {
				if m == backend.Device {
					dev++
				}
			}
			switch {
			case tc.onDevice && (errs[r] != nil || dev == 0 || dev != len(c.mems)):
				t.Errorf("DeviceDirect %v, mode %d, rank %d: %v, %d of %d messages in device memory; want the Bcast on the device",
					tc.direct, tc.mode, r, errs[r], dev, len(c.mems))
			case !tc.onDevice && dev != 0:
				t.Errorf("DeviceDirect %v, mode %d, rank %d: %d messages in device memory; want it staged", tc.direct, tc.mode, r, dev)
			case !tc.onDevice && errs[r] != nil && !errors.Is(errs[r], ErrNotSupported):
				t.Errorf("DeviceDirect %v, mode %d, rank %d: staged without CUDA: %v", tc.direct, tc.mode, r, errs[r])
			}
		}
	}
}

// TestDeviceCollEnv: COURIER_DEVICE_COLL's values, and a wrong one
// refused by Init's reading of the environment.
func TestDeviceCollEnv(t *testing.T) {
	for s, want := range map[string]devCollMode{"": devCollAuto, "auto": devCollAuto, " Direct ": devCollDirect, "staged": devCollStaged} {
		if got, err := parseDeviceColl(s); got != want || err != nil {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	cfg := config{env: func(k string) string {
		if k == deviceCollEnv {
			return "host"
		}
		return ""
	}}
	if err := cfg.fromEnv(); !errors.Is(err, ErrInvalid) {
		t.Errorf("%s=host: %v, want ErrInvalid", deviceCollEnv, err)
	}
}
