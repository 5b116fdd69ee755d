package mp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// TestProbe: a message of a size the receiver does not know is probed,
// a buffer of that size made, and the message received; Iprobe sees
// nothing before it arrives and leaves it for the receive; a probe of a
// rank that left fails.
func TestProbe(t *testing.T) {
	ranktest.Run(t, 2, func(t *ranktest.T, c *mp.Comm) {
		switch c.Rank() {
		case 0:
			msg := make([]float64, 1234)
			for i := range msg {
				msg[i] = float64(i)
			}
			if err := mp.Send(c, []byte{1}, 1, 1); err != nil { // "go ahead, probe"
				t.Errorf("send: %v", err)
			}
			if _, err := mp.Recv(c, []byte{0}, 1, 2); err != nil { // rank 1 probed nothing
				t.Errorf("recv: %v", err)
			}
			if err := mp.Send(c, msg, 1, 7); err != nil {
				t.Errorf("send: %v", err)
			}
		case 1:
			if _, err := mp.Recv(c, []byte{0}, 0, 1); err != nil {
				t.Errorf("recv: %v", err)
			}
			if found, _, err := mp.Iprobe(c, 0, 7); found || err != nil {
				t.Errorf("Iprobe before the message: %v, %v", found, err)
			}
			if err := mp.Send(c, []byte{1}, 0, 2); err != nil {
				t.Errorf("send: %v", err)
			}
			st, err := mp.Probe(c, mp.AnySource, mp.AnyTag)
			if err != nil || st.Source != 0 || st.Tag != 7 || st.Count != 1234 {
				t.Errorf("Probe: %+v, %v", st, err)
			}
			if found, st2, err := mp.Iprobe(c, 0, 7); !found || err != nil || st2 != st {
				t.Errorf("Iprobe after Probe: %v, %+v, %v (the message must stay)", found, st2, err)
			}
			buf := make([]float64, st.Count)
			if _, err := mp.Recv(c, buf, st.Source, st.Tag); err != nil {
				t.Errorf("recv: %v", err)
			}
			if buf[1233] != 1233 {
				t.Errorf("received %v", buf[1233])
			}
			if found, _, _ := mp.Iprobe(c, 0, 7); found {
				t.Errorf("Iprobe still finds the received message")
			}
		}
	})
}

// TestProbeErrors: bad arguments and a lost peer are named errors.
func TestProbeErrors(t *testing.T) {
	ranktest.Run(t, 2, func(t *ranktest.T, c *mp.Comm) {
		if _, _, err := mp.Iprobe(c, 5, 0); !errors.Is(err, mp.ErrInvalid) {
			t.Errorf("Iprobe of rank 5: %v", err)
		}
		if _, err := mp.Probe(c, 0, -3); !errors.Is(err, mp.ErrInvalid) {
			t.Errorf("Probe of tag -3: %v", err)
		}
		if c.Rank() == 0 {
			c.Close()
			return
		}
		start := time.Now()
		if _, err := mp.Probe(c, 0, 9); !errors.Is(err, mp.ErrPeerLost) {
			t.Errorf("Probe of a rank that closed: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Probe noticed after %v", d)
		}
	})
}
