package bootstrap

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if the tests leave goroutines behind: every
// goroutine alive after the tests must have been alive before them, once
// those that are winding down have had a few seconds.
func TestMain(m *testing.M) {
	before := goroutines()
	code := m.Run()
	if f := flag.Lookup("test.fuzz"); code == 0 && (f == nil || f.Value.String() == "") {
		if leaked := leakedSince(before, 5*time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d goroutines leaked by the tests:\n\n%s\n",
				len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedSince waits up to patience for the goroutines not in before to end,
// and returns the stacks of those that did not.
func leakedSince(before map[string]string, patience time.Duration) []string {
	deadline := time.Now().Add(patience)
	for {
		var leaked []string
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok && !benign(stack) {
				leaked = append(leaked, stack)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benign reports a goroutine the runtime or the testing package starts on
// its own.
func benign(stack string) bool {
	for _, s := range []string{"os/signal.signal_recv", "runtime.ensureSigM", "testing.(*M).startAlarm", "testing.runFuzz"} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// goroutines returns the stack of every goroutine, by goroutine ID.
func goroutines() map[string]string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := make(map[string]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		// "goroutine 12 [running]:\n..."
		fields := strings.Fields(g)
		if len(fields) >= 2 && fields[0] == "goroutine" {
			all[fields[1]] = g
		}
	}
	return all
}

// TestLeakCheck makes sure the leak check sees a goroutine that stays.
func TestLeakCheck(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	if leaked := leakedSince(before, 50*time.Millisecond); len(leaked) != 1 {
		t.Errorf("leak check saw %d leaked goroutines, want 1", len(leaked))
	}
	close(stop)
	<-done
	if leaked := leakedSince(before, time.Second); len(leaked) != 0 {
		t.Errorf("leak check saw %d leaked goroutines after they ended, want 0:\n%s", len(leaked), leaked)
	}
}
