package mp_test

import (
	"context"
	"errors"
	"testing"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/tcp"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// TestStreamCallsRefuseBadInput: the GPU calls check their arguments
// before any GPU work, with named errors, on a machine without a GPU too.
func TestStreamCallsRefuseBadInput(t *testing.T) {
	ranktest.Run(t, 2, func(t *ranktest.T, c *mp.Comm) {
		var none cuda.Slice[float32]
		peer := 1 - c.Rank()
		for name, q := range map[string]*mp.Request{
			"IsendOnStream, nil stream":   mp.IsendOnStream(c, none, peer, 0, nil),
			"IrecvOnStream, nil stream":   mp.IrecvOnStream(c, none, peer, 0, nil),
			"IsendOnStream, bad rank":     mp.IsendOnStream(c, none, 7, 0, new(cuda.Stream)),
			"IrecvOnStream, AnySource":    mp.IrecvOnStream(c, none, mp.AnySource, 0, new(cuda.Stream)),
			"IrecvOnStream, negative tag": mp.IrecvOnStream(c, none, peer, -5, new(cuda.Stream)),
		} {
			_, err := q.Wait()
			var oe *mp.OpError
			if !errors.As(err, &oe) || !(errors.Is(err, mp.ErrInvalid) || errors.Is(err, mp.ErrNotSupported)) {
				t.Errorf("%s: %v, want an OpError matching ErrInvalid or ErrNotSupported", name, err)
			}
		}
		// The stream-ordered collectives refuse at once, with no request.
		dead := new(cuda.Stream)
		for name, call := range map[string]func() (*mp.Request, error){
			"IbcastOnStream, nil stream":          func() (*mp.Request, error) { return mp.IbcastOnStream(c, none, 0, nil) },
			"IbcastOnStream, bad root":            func() (*mp.Request, error) { return mp.IbcastOnStream(c, none, 2, dead) },
			"IreduceOnStream, no operator":        func() (*mp.Request, error) { return mp.IreduceOnStream(c, none, none, 0, 0, dead) },
			"IallreduceOnStream, destroyed":       func() (*mp.Request, error) { return mp.IallreduceOnStream(c, none, none, mp.Sum, dead) },
			"IallreduceOnStream, nil comm":        func() (*mp.Request, error) { return mp.IallreduceOnStream(nil, none, none, mp.Sum, dead) },
			"IallgatherOnStream, nil stream":      func() (*mp.Request, error) { return mp.IallgatherOnStream(c, none, none, nil) },
			"IreduceScatterOnStream, nil stream":  func() (*mp.Request, error) { return mp.IreduceScatterOnStream(c, none, none, mp.Max, nil) },
			"IalltoallOnStream, destroyed stream": func() (*mp.Request, error) { return mp.IalltoallOnStream(c, none, none, new(cuda.Stream)) },
		} {
			q, err := call()
			if _, ok := errors.AsType[*mp.OpError](err); !ok || !errors.Is(err, mp.ErrInvalid) || q != nil {
				t.Errorf("%s: %v, %v; want no request and an OpError matching ErrInvalid", name, q, err)
			}
		}
		// A request waited for on a nil stream: ErrInvalid, and the
		// request is still usable.
		buf := []int32{1, 2, 3}
		var q *mp.Request
		if c.Rank() == 0 {
			q = mp.Isend(c, buf, 1, 3)
		} else {
			q = mp.Irecv(c, buf, 0, 3)
		}
		if err := q.WaitOn(nil); !errors.Is(err, mp.ErrInvalid) {
			t.Errorf("WaitOn(nil): %v, want ErrInvalid", err)
		}
		if _, err := q.Wait(); err != nil {
			t.Errorf("Wait after a refused WaitOn: %v", err)
		}
		if err := (*mp.Request)(nil).WaitOn(nil); !errors.Is(err, mp.ErrInvalid) {
			t.Errorf("nil request: %v", err)
		}
	})
}

// TestDeviceWithoutGPU: Comm.Device names what is missing.
func TestDeviceWithoutGPU(t *testing.T) {
	if n, err := cuda.DeviceCount(); err == nil && n > 0 {
		t.Skip("this machine has a GPU")
	}
	ranktest.Run(t, 1, func(t *ranktest.T, c *mp.Comm) {
		if _, err := c.Device(); !errors.Is(err, mp.ErrNotSupported) {
			t.Errorf("Device: %v, want ErrNotSupported", err)
		}
	})
}

// boundDriver opens tcp communicators that say they are bound to GPU 5:
// a transport with backend.DeviceConn.
type boundDriver struct{}

type boundConn struct{ backend.Conn }

func (boundConn) Device() int { return 5 }

func (boundDriver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	c, err := tcp.Driver{}.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return boundConn{c}, nil
}

func init() { backend.Register("test-device-bound", boundDriver{}) }

// TestDeviceFromTransport: Comm.Device reports the GPU of a transport
// bound to one (backend.DeviceConn), without asking CUDA.
func TestDeviceFromTransport(t *testing.T) {
	c, err := mp.Init(context.Background(), single(), mp.WithEnv(noEnv), mp.WithBackend("test-device-bound"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d, err := c.Device(); d != 5 || err != nil {
		t.Errorf("Device = %v, %v; want cuda:5 from the transport", d, err)
	}
}
