package nccl

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/courier-mp/courier/cuda"
)

// flagStride is the distance, in 8-byte words, between two completion
// words: a cache line each.
const flagStride = 8

// flagWords is a block of completion words in page-locked memory: a
// stream writes a word's next number after the work it follows
// (cuStreamWriteValue64, or launch's C call), and the CPU sees that work
// done once the word has reached the number, a load from memory instead
// of a call into the driver per look. The channels of the device
// (useFlags) and the IPC path's copy streams (cudaIPC.useTally) count
// their work this way.
type flagWords struct {
	mem  cuda.Pinned[uint64]
	addr uintptr  // mem's device address
	w    []uint64 // mem's words
	seq  []uint64 // by word: the number of its last write queued
}

// newFlagWords allocates n completion words, unless the driver cannot
// write them from a stream (the error says why). It checks, with probe,
// that a write from a stream reaches the CPU before relying on it.
func newFlagWords(n int, probe *cuda.Stream) (*flagWords, error) {
	mem, err := cuda.HostAlloc[uint64](int64(n+1) * flagStride)
	if err != nil {
		return nil, err
	}
	addr, err := mem.DevicePtr()
	if err == nil {
		w := mem.Slice()
		clear(w) // page-locked memory comes as it was left
		last := n * flagStride
		if err = probe.WriteValue64(addr+uintptr(8*last), 1); err == nil {
			err = probe.Synchronize()
		}
		if err == nil && atomic.LoadUint64(&w[last]) != 1 {
			err = errors.New("a value written from a stream did not reach host memory")
		}
	}
	if err != nil {
		mem.Free()
		return nil, err
	}
	return &flagWords{mem: mem, addr: addr, w: mem.Slice(), seq: make([]uint64, n)}, nil
}

// free frees the words.
func (f *flagWords) free() error { return f.mem.Free() }

// of returns the device address of word i.
func (f *flagWords) of(i int) uintptr { return f.addr + uintptr(8*i*flagStride) }

// write queues on s the write of word i's next number and returns it.
func (f *flagWords) write(i int, s *cuda.Stream) (uint64, error) {
	v := f.seq[i] + 1
	if err := s.WriteValue64(f.of(i), v); err != nil {
		return 0, err
	}
	f.seq[i] = v
	return v, nil
}

// reached reports whether word i has reached v.
func (f *flagWords) reached(i int, v uint64) bool {
	return atomic.LoadUint64(&f.w[i*flagStride]) >= v
}

// useFlags sets up completion words for n channels, unless the driver
// cannot write them from a stream (then the engine stays with events and
// useFlags says why). Polling a word in host memory costs the CPU a load;
// querying an event is a driver call (about 1.5 µs on an H200, measured
// with BenchmarkGPUPrimitives), which is most of a small message's
// time on the critical path.
func (d *device) useFlags(n int, probe *cuda.Stream) error {
	f, err := newFlagWords(n, probe)
	if err != nil {
		return err
	}
	d.flags = f
	return nil
}

// settle implements engine.
//
// With completion words it also queries the channel's stream: a fault on
// the GPU (the context's sticky error) stops the stream before the word is
// written, and polling the word would never end; the query returns the
// error, and the channel fails with it.
func (d *device) settle(ch int) (bool, error) {
	if d.comms[ch] == 0 {
		return false, nil
	}
	inProgress, err := d.lib.asyncState(d.comms[ch])
	if err == nil && d.flags != nil {
		if _, qerr := d.curStream(ch).Query(); qerr != nil {
			err = fmt.Errorf("nccl: the channel's stream failed: %w", qerr)
		}
	}
	return inProgress, err
}

// seal implements engine: the copies of staged receives, then the write of
// the group's number to the channel's completion word (or the event).
func (d *device) seal(g *group) error {
	st := g.res.(*staged)
	if st.seq != 0 || st.ev != nil {
		return nil // sealed by launch
	}
	for _, b := range st.backs {
		src, err := st.slab.dev.Sub(b.off, b.off+b.n)
		if err == nil {
			err = cuda.CopyToHostAsync(st.slab.host.Slice()[b.off:b.off+b.n], src, st.stream)
		}
		if err != nil {
			return fmt.Errorf("nccl: copying a staged receive of %d bytes back: %w", b.n, err)
		}
	}
	if d.flags != nil {
		v, err := d.flags.write(g.ch, st.stream)
		if err != nil {
			return fmt.Errorf("nccl: queueing the completion word's write after a group: %w", err)
		}
		st.seq = v
		return nil
	}
	ev, err := d.getEvent()
	if err != nil {
		return err
	}
	st.ev = ev
	if err := ev.Record(st.stream); err != nil {
		return fmt.Errorf("nccl: recording the event after a group: %w", err)
	}
	return nil
}

// poll implements engine.
func (d *device) poll(g *group) (bool, error) {
	st := g.res.(*staged)
	if d.flags != nil {
		return d.flags.reached(g.ch, st.seq), nil
	}
	done, err := st.ev.Query()
	if err != nil {
		return false, fmt.Errorf("nccl: a group of %d operations failed on the GPU: %w", len(g.ops), err)
	}
	return done, nil
}

// finish implements engine: staged receives reach the user's slices.
func (d *device) finish(g *group) {
	st := g.res.(*staged)
	d.finished(g.ch, st)
	for _, b := range st.backs {
		copy(unsafe.Slice((*byte)(b.dst), b.n), st.slab.host.Slice()[b.off:b.off+b.n])
	}
	d.release(g)
}

// release implements engine.
func (d *device) release(g *group) {
	st, _ := g.res.(*staged)
	g.res = nil
	if st == nil {
		return
	}
	if st.ev != nil {
		d.events = append(d.events, st.ev)
	}
	if st.slab != nil {
		d.slabs = append(d.slabs, st.slab)
	}
	clear(st.backs)
	st.stream, st.onShared = nil, false
	st.seq, st.ev, st.slab, st.backs = 0, nil, nil, st.backs[:0]
	d.staged = append(d.staged, st)
}
