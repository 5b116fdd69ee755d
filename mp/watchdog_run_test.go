package mp_test

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// syncBuffer is a bytes.Buffer for one writer and one reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A receive that waits past the watchdog's period has the report written
// once, with the line that called it, and still completes when the
// message comes.
func TestWatchdogReportsOnceAndWaits(t *testing.T) {
	const period = 150 * time.Millisecond
	var out syncBuffer
	old := mp.SetReportOutput(&out)
	defer mp.SetReportOutput(old)
	env := map[string]string{"COURIER_WATCHDOG": period.String()}
	var recvLine int
	mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
		switch c.Rank() {
		case 1:
			got := make([]int32, 1)
			_, _, line, _ := runtime.Caller(0)
			recvLine = line + 2
			if _, err := mp.Recv(c, got, 0, 7); err != nil {
				t.Fatal(err)
			}
			if got[0] != 42 {
				t.Errorf("got %d, want 42", got[0])
			}
		case 0:
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(out.String(), "courier: watchdog") {
				if time.Now().After(deadline) {
					t.Fatal("the watchdog wrote nothing in 20s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(4 * period) // room for a second report, which must not come
			if err := mp.Send(c, []int32{42}, 1, 7); err != nil {
				t.Fatal(err)
			}
		}
	}, mptest.WithInitOptions(mp.WithEnv(func(k string) string { return env[k] })))
	text := out.String()
	if n := strings.Count(text, "courier: watchdog"); n != 1 {
		t.Errorf("the watchdog wrote %d reports, want 1:\n%s", n, text)
	}
	for _, want := range []string{
		"rank 1 of world",
		"recv from rank 0, tag 7, 1 × int32",
		fmt.Sprintf("watchdog_run_test.go:%d", recvLine),
		"COURIER_WATCHDOG=" + period.String(),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
}
