//go:build linux

package shm

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPublishWakes runs the protocol fence.go describes many times, with
// the consumer arming its bell just as the producer publishes: a producer
// that publishes with a release store and then finds the bell unarmed
// must never leave the consumer asleep (a wake-up lost shows as a sleep
// that runs to its timeout).
func TestPublishWakes(t *testing.T) {
	fast := EnableFastPublish()
	t.Logf("fast publishing: %v", fast)
	t.Run("fast", func(t *testing.T) {
		if !fast {
			t.Skip("membarrier refused here: Publish is sequentially consistent")
		}
		publishWakes(t)
	})
	t.Run("ordered", func(t *testing.T) {
		// Where fast publishing is off, the atomic store is the fence.
		fastPublish.Store(false)
		defer fastPublish.Store(fast)
		publishWakes(t)
	})
}

func publishWakes(t *testing.T) {
	var word atomic.Uint64
	var ack atomic.Uint64
	var bellWord uint32
	bell := NewBell(&bellWord)
	n := uint64(20000)
	if testing.Short() {
		n = 2000
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := uint64(1); k <= n; k++ {
			Publish(&word, k)
			bell.Ring()
			// A tight spin, so that this store meets the consumer's arming
			// of the bell for the next message as often as can be.
			for i := 0; ack.Load() != k; i++ {
				if i%4096 == 4095 {
					runtime.Gosched()
				}
			}
		}
	}()
	const nap = 2 * time.Second
	for k := uint64(1); k <= n; k++ {
		// Poll for a while first, a different while for each message,
		// so that the arming below falls at every moment of the
		// producer's publishing, the window a missing fence would open.
		for i := k * 7919 % 509; i > 0 && word.Load() != k; i-- {
		}
		for word.Load() != k {
			v := bell.Arm()
			SleepFence()
			if word.Load() == k {
				bell.Disarm()
				break
			}
			start := time.Now()
			require.NoError(t, bell.Sleep(v, nap))
			if word.Load() == k && time.Since(start) >= nap/2 {
				t.Fatalf("message %d: published, but its consumer slept %v (a lost wake-up)", k, time.Since(start))
			}
		}
		ack.Store(k)
	}
	<-done
}

// TestPublishOrders: a consumer that sees a published word sees every
// store the producer made before publishing it.
func TestPublishOrders(t *testing.T) {
	EnableFastPublish()
	var data [8]uint64
	var word atomic.Uint64
	const n = 200000
	go func() {
		for k := uint64(1); k <= n; k++ {
			for i := range data {
				atomic.StoreUint64(&data[i], k) // the payload; plain stores in a ring
			}
			Publish(&word, k)
			for word.Load() != 0 { // the consumer takes it
				runtime.Gosched()
			}
		}
	}()
	for k := uint64(1); k <= n; k++ {
		for word.Load() != k {
			runtime.Gosched()
		}
		for i := range data {
			if got := atomic.LoadUint64(&data[i]); got != k {
				t.Fatalf("message %d: word %d holds %d", k, i, got)
			}
		}
		word.Store(0)
	}
}

// TestPrefetch: the hints read and change nothing.
func TestPrefetch(t *testing.T) {
	b := []byte{1, 2, 3}
	Prefetch(&b[1])
	PrefetchWrite(&b[2])
	assert.Equal(t, []byte{1, 2, 3}, b)
	var w atomic.Uint64
	storeRelease(&w, 7)
	assert.Equal(t, uint64(7), w.Load())
}
