package nccl

import (
	"fmt"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// launch implements engine.
func (d *device) launch(g *group) (bool, error) {
	var need int64
	for i := range g.ops {
		o := &g.ops[i]
		switch {
		case o.coll != 0:
			need += collStaging(o)
		case o.addr == 0 && !o.token && (o.scratch || o.buf.Mem == backend.Host):
			need += alignUp(o.bytes())
		}
	}
	st := d.getStaged()
	g.res = st
	if need > 0 {
		s, err := d.getSlab(need)
		if err != nil {
			return false, err
		}
		st.slab = s
	}
	d.ops = d.ops[:0]
	comm := d.comms[g.ch]
	if comm == 0 {
		return false, fmt.Errorf("nccl: internal error: no communicator for channel %d", g.ch)
	}
	s, onShared := d.pick(g.ch)
	d.launched(g.ch, st, s, onShared)
	stream := s.Handle()
	var off int64
	for i := range g.ops {
		o := &g.ops[i]
		if o.coll != 0 {
			if err := d.addColl(o, st, &off, comm, s); err != nil {
				return false, err
			}
			continue
		}
		n := o.bytes()
		typ, count, err := wireType(o.typ, o.count)
		if err != nil {
			return false, err
		}
		var ptr uintptr
		switch {
		case o.addr != 0:
			ptr = o.addr
		case o.token:
			// The connection buffers: byte 0 is sent, byte 1+p receives
			// from rank p.
			ptr = d.warm.Ptr()
			if o.recv {
				ptr += uintptr(1 + o.peer)
			}
		case o.scratch:
			ptr = st.slab.dev.Ptr() + uintptr(off)
			typ, count = ncclUint8, uint64(n)
			off += alignUp(n)
		case o.buf.Mem == backend.Device:
			ptr = uintptr(o.buf.Ptr)
		default:
			ptr = st.slab.dev.Ptr() + uintptr(off)
			if o.recv {
				st.backs = append(st.backs, copyBack{off: off, n: n, dst: o.buf.Ptr})
			} else {
				pin := st.slab.host.Slice()[off : off+n]
				copy(pin, unsafe.Slice((*byte)(o.buf.Ptr), n))
				dst, err := st.slab.dev.Sub(off, off+n)
				if err == nil {
					err = cuda.CopyToDeviceAsync(dst, pin, s)
				}
				if err != nil {
					return false, fmt.Errorf("nccl: staging a send of %d bytes to rank %d: %w", n, o.peer, err)
				}
			}
			off += alignUp(n)
		}
		d.ops.add(comm, stream, ptr, count, channelPeer(g.ch), typ, o.recv)
	}
	// With nothing to queue between the group and its seal (no staged
	// receive to copy back), the seal goes in the same C call: one cgo
	// call and one context switch fewer per operation.
	var then *after
	var ev *cuda.Event
	if len(st.backs) == 0 {
		if d.flags != nil {
			d.after = afterWrite(stream, d.flags.of(g.ch), d.flags.seq[g.ch]+1)
		} else {
			var err error
			if ev, err = d.getEvent(); err != nil {
				return false, err
			}
			d.after = afterRecord(stream, ev.Handle())
		}
		then = &d.after
	}
	ops := d.ops
	inProgress, nccl, sealed, err := d.lib.groupThen(d.hooks, ops, d.timed, then)
	g.nccl += nccl
	switch {
	case sealed && d.flags != nil:
		d.flags.seq[g.ch]++
		st.seq = d.flags.seq[g.ch]
	case sealed:
		st.ev = ev
	case ev != nil:
		d.events = append(d.events, ev)
	}
	return inProgress, err
}

// collStaging is the staging memory collective o needs: its host
// buffers (a Bcast's one buffer once), or, for an Alltoall in place in
// device memory, a copy of the send buffer (a rank's receives must not
// overwrite what it has yet to send).
func collStaging(o *op) int64 {
	switch {
	case o.buf.Mem == backend.Host && o.coll == backend.Bcast:
		return alignUp(o.buf.Len())
	case o.buf.Mem == backend.Host:
		return alignUp(o.buf.Len()) + alignUp(o.buf2.Len())
	case o.coll == backend.Alltoall && o.buf.Count > 0 && o.buf.Ptr == o.buf2.Ptr:
		return alignUp(o.buf.Len())
	}
	return 0
}

// addColl adds collective o to the launch on communicator comm (the
// channel of all ranks) and stream s: host buffers are staged through the
// group's slab from *off on (the send buffer copied in before, the receive
// buffer copied back after), device buffers go as they are. An Alltoall is
// a send and a receive with every rank.
func (d *device) addColl(o *op, st *staged, off *int64, comm uintptr, s *cuda.Stream) error {
	// in copies buffer b into the slab (from the host, or, with fromDev,
	// from the device) and returns its address there.
	in := func(b backend.Buffer, fromDev bool) (uintptr, error) {
		n := b.Len()
		ptr := st.slab.dev.Ptr() + uintptr(*off)
		dst, err := st.slab.dev.Sub(*off, *off+n)
		if err == nil && fromDev {
			err = cuda.CopyDeviceAsync(dst, cuda.ByteView(uintptr(b.Ptr), n, d.dev), s)
		} else if err == nil {
			pin := st.slab.host.Slice()[*off : *off+n]
			copy(pin, b.Bytes())
			err = cuda.CopyToDeviceAsync(dst, pin, s)
		}
		if err != nil {
			return 0, fmt.Errorf("nccl: staging the %v's %d bytes: %w", o.coll, n, err)
		}
		*off += alignUp(n)
		return ptr, nil
	}
	send, recv := uintptr(o.buf.Ptr), uintptr(o.buf2.Ptr)
	var err error
	switch {
	case o.buf.Mem == backend.Host && o.buf.Count > 0:
		at := *off
		if send, err = in(o.buf, false); err != nil {
			return err
		}
		if o.coll == backend.Bcast {
			recv = send
			st.backs = append(st.backs, copyBack{off: at, n: o.buf.Len(), dst: o.buf.Ptr})
		} else if n := o.buf2.Len(); n > 0 {
			recv = st.slab.dev.Ptr() + uintptr(*off)
			st.backs = append(st.backs, copyBack{off: *off, n: n, dst: o.buf2.Ptr})
			*off += alignUp(n)
		}
	case o.coll == backend.Alltoall && o.buf.Count > 0 && o.buf.Ptr == o.buf2.Ptr:
		if send, err = in(o.buf, true); err != nil {
			return err
		}
	}
	if o.buf2.Count == 0 {
		recv = send // a non-root's Reduce: NCCL does not write it
	}
	stream := s.Handle()
	if o.coll == backend.Alltoall {
		n := o.count / int64(d.size)
		typ, count, err := wireType(o.typ, n)
		if err != nil {
			return err
		}
		// This rank's own block too is a send and a receive: NCCL moves
		// it inside the group's kernel, beside the others. (A copy on the
		// stream before the group was measured slower on 2 H200s: 0.90 ×
		// the bus bandwidth of C at 32-512 MiB, +5 µs at 8 B.)
		block := uintptr(n * int64(o.typ.Size()))
		for p := range d.size {
			d.ops.add(comm, stream, send+uintptr(p)*block, count, p, typ, false)
			d.ops.add(comm, stream, recv+uintptr(p)*block, count, p, typ, true)
		}
		return nil
	}
	n := o.count
	if o.coll == backend.ReduceScatter {
		n = o.buf2.Count
	}
	typ, count, ok := collType(o.typ, n, o.coll.Reduces(), o.redop)
	if !ok {
		return fmt.Errorf("nccl: internal error: NCCL has no %v of %v", o.redop, o.typ)
	}
	d.ops.addColl(comm, stream, o.coll, send, recv, count, typ, ncclOps[o.redop], o.root)
	return nil
}
