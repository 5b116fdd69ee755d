package nccl

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/courier-mp/courier/cuda"
)

// flagStride is the distance, in 8-byte words, between the completion
// words of two channels: a cache line each.
const flagStride = 8

// useFlags sets up completion words for n channels, unless the driver
// cannot write them from a stream (then the engine stays with events and
// useFlags says why). Polling a word in host memory costs the CPU a load;
// querying an event is a driver call (about 1.5 µs on an H200, measured
// with BenchmarkGPUPrimitives), which is most of a small message's
// time on the critical path. It checks that a write from a stream reaches
// the CPU before relying on it.
func (d *device) useFlags(n int, probe *cuda.Stream) error {
	mem, err := cuda.HostAlloc[uint64](int64(n+1) * flagStride)
	if err != nil {
		return err
	}
	addr, err := mem.DevicePtr()
	if err == nil {
		w := mem.Slice()
		clear(w)
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
		return err
	}
	d.flagMem, d.flagAddr, d.flags, d.seq = mem, addr, mem.Slice(), make([]uint64, n)
	return nil
}

// flagOf returns the device address of channel ch's completion word.
func (d *device) flagOf(ch int) uintptr { return d.flagAddr + uintptr(8*ch*flagStride) }

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
		d.seq[g.ch]++
		st.seq = d.seq[g.ch]
		if err := st.stream.WriteValue64(d.flagOf(g.ch), st.seq); err != nil {
			return fmt.Errorf("nccl: queueing the completion word's write after a group: %w", err)
		}
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
		return atomic.LoadUint64(&d.flags[g.ch*flagStride]) >= st.seq, nil
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
