package mp

import (
	"errors"
	"testing"
	"time"
)

func TestWatchdogFromEnv(t *testing.T) {
	for _, c := range []struct {
		val  string
		want time.Duration
		set  bool
		ok   bool
	}{
		{"", 0, false, true},
		{"5m", 5 * time.Minute, true, true},
		{" 250ms ", 250 * time.Millisecond, true, true},
		{"90", 90 * time.Second, true, true},
		{"0", 0, true, true},
		{"off", 0, true, true},
		{"OFF", 0, true, true},
		{"-1s", 0, true, false},
		{"later", 0, true, false},
	} {
		env := func(k string) string {
			if k == "COURIER_WATCHDOG" {
				return c.val
			}
			return ""
		}
		d, set, err := watchdogFromEnv(env)
		if c.ok && (err != nil || d != c.want || set != c.set) {
			t.Errorf("COURIER_WATCHDOG=%q: %v, %v, %v; want %v, %v", c.val, d, set, err, c.want, c.set)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("COURIER_WATCHDOG=%q: %v, %v; want ErrInvalid", c.val, d, err)
		}
	}
}

// The watchdog watches a communicator without a timeout by default, not
// one with a timeout (whose abort reports), unless it is set.
func TestWatchdogPeriod(t *testing.T) {
	if got := watchdogPeriod(0, false, 0); got != DefaultWatchdog {
		t.Errorf("no setting, no timeout: %v, want %v", got, DefaultWatchdog)
	}
	if got := watchdogPeriod(0, false, time.Minute); got != 0 {
		t.Errorf("no setting, a timeout: %v, want off", got)
	}
	if got := watchdogPeriod(time.Second, true, time.Minute); got != time.Second {
		t.Errorf("set, with a timeout: %v, want 1s", got)
	}
	if got := watchdogPeriod(0, true, 0); got != 0 {
		t.Errorf("set off: %v, want off", got)
	}
}
