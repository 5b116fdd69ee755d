package leakcheck

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	os.Exit(Check(m.Run()))
}

// TestFind makes sure the check sees a goroutine that stays, unless told
// it may, and no longer once it has ended.
func TestFind(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	err := find(50 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "leakcheck.TestFind") {
		t.Errorf("the check saw %v, want the goroutine TestFind started", err)
	}
	if code := Check(0, "github.com/courier-mp/courier/internal/leakcheck.TestFind.func1"); code != 0 {
		t.Errorf("Check = %d with a goroutine it was told may stay, want 0", code)
	}
	if code := Check(3); code != 3 {
		t.Errorf("Check(3) = %d: the tests' own failure must stand", code)
	}
	close(stop)
	<-done
	if err := find(time.Second); err != nil {
		t.Errorf("the check still saw a goroutine after it ended: %v", err)
	}
}
