package engine

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Check(m.Run())) }

var errTest = errors.New("test result")

// TestCompletionDoneAfterComplete: a Done channel asked for after the
// result is published is closed at once, and the next use of the same
// completion gets a fresh one that is open until that use completes.
func TestCompletionDoneAfterComplete(t *testing.T) {
	var c completion
	c.init()
	c.complete(backend.Status{Count: 1}, nil)
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of a completed request is open")
	}
	c.reset()
	ch := c.Done()
	select {
	case <-ch:
		t.Fatal("the next use's Done is closed before it completes")
	default:
	}
	c.complete(backend.Status{Count: 2}, errTest)
	<-ch
	st, err := c.Wait(0)
	if st.Count != 2 || err != errTest {
		t.Fatalf("Wait = %v, %v", st, err)
	}
}

// TestCompletionRaces runs complete against blocking waiters, timed
// waiters, Done and Test, through many uses of one completion: every use
// ends with its own result for everyone, and nothing blocks.
func TestCompletionRaces(t *testing.T) {
	var c completion
	c.init()
	uses := raceUses()
	for i := range uses {
		want := backend.Status{Count: int64(i)}
		var wg sync.WaitGroup
		check := func(st backend.Status, err error) {
			if st != want || err != nil {
				t.Errorf("use %d: got %v, %v", i, st, err)
			}
		}
		switch i % 4 {
		case 0:
			wg.Go(func() { check(c.Wait(0)) })
		case 1:
			wg.Go(func() { check(c.Wait(time.Minute)) })
		case 2:
			wg.Go(func() {
				<-c.Done()
				_, st, err := c.Test()
				check(st, err)
			})
		case 3:
			wg.Go(func() {
				for {
					if done, st, err := c.Test(); done {
						check(st, err)
						return
					}
				}
			})
		}
		if i%3 == 0 {
			wg.Go(func() { check(c.Wait(0)) }) // a second waiter
		}
		c.complete(want, nil)
		wg.Wait()
		c.reset()
		if t.Failed() {
			return
		}
	}
}

// TestCompletionTimeout: a timed wait that expires reports ErrTimeout and
// leaves the request pending; a later completion still reaches a waiter.
func TestCompletionTimeout(t *testing.T) {
	var c completion
	c.init()
	if _, err := c.Wait(time.Millisecond); !errors.Is(err, backend.ErrTimeout) {
		t.Fatalf("Wait = %v, want ErrTimeout", err)
	}
	if c.isDone() {
		t.Fatal("done after a timeout")
	}
	go c.complete(backend.Status{Count: 7}, nil)
	if st, err := c.Wait(0); st.Count != 7 || err != nil {
		t.Fatalf("Wait = %v, %v", st, err)
	}
	c.reset()
	if c.isDone() || len(c.wake) != 0 {
		t.Fatal("reset left a result or a token")
	}
}

// TestCompletionNotify: a function given to notify before completion is
// called once, by the completer, with the result published; one given
// after is called at once; and the next use calls only its own.
func TestCompletionNotify(t *testing.T) {
	var c completion
	c.init()
	calls := 0
	c.notify(func() {
		calls++
		if !c.isDone() || c.st.Count != 3 {
			t.Error("notified before the result was published")
		}
	})
	if calls != 0 {
		t.Fatal("notified before completion")
	}
	c.complete(backend.Status{Count: 3}, nil)
	if calls != 1 {
		t.Fatalf("%d calls after completion, want 1", calls)
	}
	if st, err := c.Wait(0); st.Count != 3 || err != nil {
		t.Fatalf("Wait = %v, %v", st, err)
	}
	c.notify(func() { calls++ }) // completed: at once
	if calls != 2 {
		t.Fatalf("%d calls, want 2 (notify after completion calls at once)", calls)
	}
	c.reset()
	second := 0
	c.notify(func() { second++ })
	c.complete(backend.Status{Count: 4}, nil)
	if calls != 2 || second != 1 {
		t.Fatalf("the next use: %d calls of the first function, %d of its own; want 2, 1", calls, second)
	}
}

// TestCompletionNotifyRaces: notify against a completer on another
// goroutine, through many uses: each use's function runs exactly once,
// and it has finished by the time reset returns, though a poller sees the
// result (and may reset) before it runs.
func TestCompletionNotifyRaces(t *testing.T) {
	var c completion
	c.init()
	uses := raceUses()
	for i := range uses {
		var calls atomic.Int32
		done := make(chan struct{})
		go func() {
			c.complete(backend.Status{Count: int64(i)}, nil)
			close(done)
		}()
		c.notify(func() {
			if i%64 == 0 {
				time.Sleep(20 * time.Microsecond) // a slow one, still running when the poller resets
			}
			calls.Add(1)
		})
		for !c.isDone() {
		}
		c.reset() // waits for the function, if it is running
		if n := calls.Load(); n != 1 {
			t.Fatalf("use %d: %d calls by the time reset returned, want 1", i, n)
		}
		<-done
	}
}

// raceUses is how many uses of one completion a race test runs: 20,000,
// or 2,000 with -short.
func raceUses() int {
	if testing.Short() {
		return 2000
	}
	return 20000
}
