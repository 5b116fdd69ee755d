package mp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// check2 is the environment of a job with COURIER_CHECK=2.
func check2(k string) string {
	if k == "COURIER_CHECK" {
		return "2"
	}
	return ""
}

// With COURIER_CHECK=2, a send buffer written between Isend and the
// send's completion fails the send with ErrModified naming the call and
// the bytes (a large message, which waits for its receive, and a small
// one, which has gone already but whose buffer was still the library's);
// a buffer left alone sends as ever, and without the check nothing is
// said.
func TestSendBufferModified(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		n         int // float64 elements
		at        int // the element written
		want      string
		guard     bool
		untouched bool
	}{
		{name: "large", n: 1 << 17, at: 70000, guard: true, want: "bytes [557056, 561152) of the 1048576-byte send buffer changed between Isend (called at "},
		{name: "small", n: 16, at: 3, guard: true, want: "bytes [0, 128) of the 128-byte send buffer changed"},
		{name: "left alone", n: 1 << 17, at: -1, guard: true},
		{name: "no check", n: 1 << 17, at: 70000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.at >= 0 && mp.RaceEnabled {
				// The mistake is a data race by construction: the
				// program writes what a link's goroutine may read.
				t.Skip("writes a buffer the library owns: a data race, which the race detector would rightly report")
			}
			var sendErr error
			opts := []mptest.Option{mptest.WithBackend("tcp")}
			if c.guard {
				opts = append(opts, mptest.WithInitOptions(mp.WithEnv(check2)))
			}
			mptest.Run(t, 2, func(t *testing.T, comm *mp.Comm) {
				buf := make([]float64, c.n)
				if comm.Rank() == 1 {
					time.Sleep(50 * time.Millisecond) // the sender writes before the receive comes
					if _, err := mp.Recv(comm, buf, 0, 1); err != nil {
						t.Error(err)
					}
					return
				}
				q := mp.Isend(comm, buf, 1, 1)
				if c.at >= 0 {
					buf[c.at] = 1 // the mistake
				}
				_, sendErr = q.Wait()
			}, opts...)
			switch {
			case c.want != "":
				if !errors.Is(sendErr, mp.ErrModified) || !strings.Contains(sendErr.Error(), c.want) ||
					!strings.Contains(sendErr.Error(), "guard_test.go:") {
					t.Fatalf("send: %v, want ErrModified with %q at guard_test.go", sendErr, c.want)
				}
			case sendErr != nil:
				t.Fatalf("send: %v", sendErr)
			}
		})
	}
}
