package mp

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTimeoutFromEnv(t *testing.T) {
	for _, c := range []struct {
		val  string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"  ", 0, true},
		{"30s", 30 * time.Second, true},
		{" 2m ", 2 * time.Minute, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{"-1", 0, false},
		{"-3s", 0, false},
		{"soon", 0, false},
	} {
		env := func(k string) string {
			if k == "COURIER_TIMEOUT" {
				return c.val
			}
			return ""
		}
		d, err := timeoutFromEnv(env)
		if c.ok && (err != nil || d != c.want) {
			t.Errorf("COURIER_TIMEOUT=%q: %v, %v; want %v", c.val, d, err, c.want)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("COURIER_TIMEOUT=%q: %v, %v; want ErrInvalid", c.val, d, err)
		}
	}
}

// Init's bound: the context's deadline, else the timeout, else the
// default.
func TestInitContext(t *testing.T) {
	left := func(ctx context.Context) time.Duration {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		return time.Until(dl)
	}
	near := func(got, want time.Duration) bool { return got <= want && got > want-time.Second }

	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx, done := initContext(parent, time.Second)
	if ctx != parent {
		t.Error("a context with a deadline was replaced")
	}
	done()
	if parent.Err() != nil {
		t.Error("the cancel of a kept context ended it")
	}

	ctx, done = initContext(context.Background(), 5*time.Second)
	if got := left(ctx); !near(got, 5*time.Second) {
		t.Errorf("with a timeout of 5s: %v left", got)
	}
	done()
	if ctx.Err() == nil {
		t.Error("cancel did not end the bounded context")
	}

	ctx, done = initContext(context.Background(), 0)
	defer done()
	if got := left(ctx); !near(got, DefaultInitTimeout) {
		t.Errorf("with no timeout: %v left, want DefaultInitTimeout (%v)", got, DefaultInitTimeout)
	}
}

// WaitAny is bounded by the shortest timeout among its requests'
// communicators.
func TestAnyBound(t *testing.T) {
	none, short, long := &Comm{}, &Comm{timeout: time.Second}, &Comm{timeout: time.Minute}
	var nilComm *Comm
	b := time.Duration(0)
	for _, c := range []*Comm{nilComm, none, long, short, none, long} {
		b = c.anyBound(b)
	}
	if b != time.Second {
		t.Errorf("bound %v, want the shortest, 1s", b)
	}
	if b := none.anyBound(0); b != 0 {
		t.Errorf("no timeouts: bound %v, want none", b)
	}
	if !none.deadline().IsZero() || !nilComm.deadline().IsZero() {
		t.Error("a communicator without a timeout has a deadline")
	}
	if dl := short.deadline(); time.Until(dl) > time.Second || time.Until(dl) < 0 {
		t.Errorf("deadline %v from now, want within 1s", time.Until(dl))
	}
}
