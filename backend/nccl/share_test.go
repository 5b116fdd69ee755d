package nccl

import (
	"math/rand/v2"
	"testing"

	"github.com/courier-mp/courier/cuda"
)

// sharedEngine is a device engine of rank 0 of a job of size ranks with
// stand-in streams (pick and its bookkeeping only compare them).
func sharedEngine(size int) *device {
	d := &device{streams: make([]*cuda.Stream, 2*size)}
	shared := make([]*cuda.Stream, size)
	for p := 1; p < size; p++ {
		d.streams[sendChan(p)], d.streams[recvChan(p)] = new(cuda.Stream), new(cuda.Stream)
		shared[p] = new(cuda.Stream)
	}
	d.setShared(shared)
	return d
}

func TestPickShared(t *testing.T) {
	d := sharedEngine(2)
	send, recv, sh := sendChan(1), recvChan(1), d.shared[1]
	launch := func(ch int, want *cuda.Stream) *staged {
		t.Helper()
		s, onShared := d.pick(ch)
		if s != want || onShared != (s == sh) {
			t.Fatalf("channel %d goes on %p (shared %v), want %p (the shared stream is %p)", ch, s, onShared, want, sh)
		}
		st := new(staged)
		d.launched(ch, st, s, onShared)
		return st
	}
	a := launch(send, sh)               // idle: the shared stream
	b := launch(recv, d.streams[recv])  // the shared one is busy with the send channel's group
	c := launch(send, sh)               // the send channel follows its unfinished group
	b2 := launch(recv, d.streams[recv]) // the receive channel follows its own
	d.finished(send, a)
	d.finished(send, c)
	// The shared stream is idle, but the receive channel's groups are not
	// finished: it stays on its own stream.
	b3 := launch(recv, d.streams[recv])
	for _, st := range []*staged{b, b2, b3} {
		d.finished(recv, st)
	}
	launch(recv, sh)
	// A pinned channel (follow) goes on its own stream, and only once.
	d.pinned[send] = true
	e := launch(send, d.streams[send])
	d.finished(send, e)
	if d.pinned[send] {
		t.Fatal("the pin outlived the launch")
	}
}

// TestPickSharedRandom launches and finishes groups at random (each
// channel's in order) and checks what makes sharing safe: the shared
// stream never holds unfinished groups of two channels, and a channel's
// unfinished groups are on one stream, except after a pin (where follow
// orders the own stream after the shared one).
func TestPickSharedRandom(t *testing.T) {
	const size = 3
	d := sharedEngine(size)
	rng := rand.New(rand.NewPCG(1, 2))
	type live struct {
		st     *staged
		pinned bool
	}
	queues := make([][]live, 2*size)
	for step := range 20000 {
		ch := 2 + rng.IntN(2*size-2) // channels of ranks 1 and 2
		switch rng.IntN(3) {
		case 0, 1:
			pinned := rng.IntN(20) == 0
			d.pinned[ch] = pinned
			s, onShared := d.pick(ch)
			st := new(staged)
			d.launched(ch, st, s, onShared)
			queues[ch] = append(queues[ch], live{st, pinned})
			// From the last pin on (follow ordered the stream after the
			// groups before it), all on one stream.
			from := 0
			for i, q := range queues[ch] {
				if q.pinned {
					from = i
				}
			}
			for _, q := range queues[ch][from:] {
				if q.st.stream != s {
					t.Fatalf("step %d: channel %d's unfinished groups since its last pin are on two streams", step, ch)
				}
			}
		case 2:
			if len(queues[ch]) > 0 {
				d.finished(ch, queues[ch][0].st)
				queues[ch] = queues[ch][1:]
			}
		}
		for p := 1; p < size; p++ {
			owners := map[int]bool{}
			n := 0
			for _, c := range []int{sendChan(p), recvChan(p)} {
				for _, q := range queues[c] {
					if q.st.stream == d.shared[p] {
						owners[c] = true
						n++
					}
				}
			}
			if len(owners) > 1 {
				t.Fatalf("step %d: the shared stream of rank %d holds unfinished groups of two channels", step, p)
			}
			if n != d.sharedLive[p] {
				t.Fatalf("step %d: %d groups on rank %d's shared stream, counted %d", step, n, p, d.sharedLive[p])
			}
		}
	}
}

// TestPickUnshared: without shared streams every channel keeps to its own.
func TestPickUnshared(t *testing.T) {
	d := &device{streams: []*cuda.Stream{nil, nil, new(cuda.Stream), new(cuda.Stream)}}
	for _, ch := range []int{2, 3, 2} {
		s, onShared := d.pick(ch)
		if s != d.streams[ch] || onShared {
			t.Fatalf("channel %d: %p, %v", ch, s, onShared)
		}
		d.launched(ch, new(staged), s, onShared)
	}
}
