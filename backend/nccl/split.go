package nccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// Derived communicators (backend.Splitter: package mp's Split and Dup).
//
// A derived communicator is a communicator of this package in its own
// right, made the way Open makes one, over its own ranks: its own host
// connection (the Split of this one's, a tcp communicator of the members),
// its own channels (new NCCL communicators of two ranks, one per
// direction between two members, each with its own stream) and, when this
// one has it, its own communicator of every member for the collectives.
// The NCCL unique IDs travel over the new host connection (an all-gather
// of hellos, as Open's), and the NCCL communicators are created with
// ncclCommInitRank, as Open's are.
//
// Why new communicators, and not ncclCommSplit of this one's:
//
//   - ncclCommSplit of the communicator of every rank is collective over
//     every rank of the parent, members or not; package mp calls Split on
//     the members only (a rank of another color, or of none, is busy with
//     its own communicator or with none), and making every rank of the
//     parent take part would serialize unrelated Splits behind each other.
//     ncclCommInitRank with an ID made by the new rank 0 involves the
//     members only.
//   - ncclCommSplit of a channel is collective over its two ranks and, in
//     NCCL, must not run beside other calls on the parent communicator,
//     which the parent's progress goroutine makes at any time: it would
//     have to stop the parent's traffic on every shared channel while the
//     split runs. New communicators leave the parent alone.
//   - It needs NCCL 2.18; ncclCommInitRank is in every NCCL courier loads.
//
// What it costs: the NCCL communicators are set up from scratch (NCCL's
// bootstrap for each; not yet measured on GPUs) and each has its own
// streams and staging memory. Channels made lazily, on first use, would
// save those of pairs that never talk, but would put NCCL's blocking
// creation, which waits for the peer, on the path of a send that must not
// wait (a send to a rank busy elsewhere), so every channel is made here.
//
// Split therefore communicates and blocks until every member has called
// it (package mp calls it on every member right after the all-gather that
// agreed on id and members, so it does not wait long), bounded by
// splitBound. Everything is apart from this communicator: the derived
// one's messages and collectives never block or reorder this one's, and
// its Close and Abort end only it. Close of this communicator does not end
// the derived ones by itself (package mp closes them first); their host
// connections end with this one's, so their operations with other ranks
// then fail.

// splitSpec is what making a derived communicator takes: its id, this
// rank's rank and the number of ranks in it, and its host connection (nil
// with one member).
type splitSpec struct {
	id         uint32
	rank, size int
	ctl        *control
	fam        *family
}

// deriveFunc makes a derived communicator (the real engine's: opening's
// deriver; the tests': the fake engine's). It owns spec.ctl: on failure
// it has aborted and closed it.
type deriveFunc func(ctx context.Context, spec splitSpec) (*conn, error)

// Split implements backend.Splitter: see above. members lists the ranks
// of this communicator in the new one's order; this rank is among them.
func (c *conn) Split(id uint32, members []int) (backend.Conn, error) {
	if c.derive == nil {
		return nil, fmt.Errorf("nccl: %w: this communicator cannot derive others", backend.ErrNotSupported)
	}
	if err := c.checkMembers(members); err != nil {
		return nil, err
	}
	c.mu.Lock()
	err := c.fatal
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	spec := splitSpec{id: id, rank: slices.Index(members, c.rank), size: len(members), fam: c.fam}
	if len(members) > 1 {
		sp, ok := c.ctl.tc.(backend.Splitter)
		if !ok {
			return nil, fmt.Errorf("nccl: %w: the host connection cannot derive communicators", backend.ErrNotSupported)
		}
		tc, err := sp.Split(id, members)
		if err != nil {
			return nil, fmt.Errorf("nccl: the host connection of the derived communicator: %w", err)
		}
		spec.ctl = newControl(tc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), splitBound)
	defer cancel()
	d, err := c.derive(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("nccl: making the derived communicator %d (rank %d of %d): %w", id, spec.rank, spec.size, err)
	}
	return d, nil
}

// checkMembers validates Split's members: not empty, ranks of this
// communicator, each once, this rank among them.
func (c *conn) checkMembers(members []int) error {
	seen := make(map[int]bool, len(members))
	for _, m := range members {
		if m < 0 || m >= c.size {
			return fmt.Errorf("nccl: %w: member %d of a communicator of %d ranks", backend.ErrInvalid, m, c.size)
		}
		if seen[m] {
			return fmt.Errorf("nccl: %w: rank %d is a member twice", backend.ErrInvalid, m)
		}
		seen[m] = true
	}
	if !seen[c.rank] {
		return fmt.Errorf("nccl: %w: this rank (%d) is not among the members %v", backend.ErrInvalid, c.rank, members)
	}
	return nil
}

// deriver returns the real engine's deriveFunc: a communicator made by
// Open's phases, with this Open's GPU, library and modes, the host
// connection it is given, and hellos exchanged over it.
func (o *opening) deriver() deriveFunc {
	// What the derived ones take from this Open (not its engine).
	base, parentLo, world := *o, o.lo, o.world
	base.eng, base.ctl, base.hellos, base.lo, base.fam = nil, nil, nil, nil, nil
	return func(ctx context.Context, spec splitSpec) (*conn, error) {
		cfg := base.cfg
		cfg.Job.Rank, cfg.Job.Size = spec.rank, spec.size
		cfg.Exchange = ctlExchange{ctl: spec.ctl, rank: spec.rank, size: spec.size}
		d := &opening{
			cfg: cfg, rank: spec.rank, size: spec.size,
			trace:    newOpenTrace(cfg.Getenv, spec.rank),
			blocking: base.blocking, events: base.events, share: base.share,
			ctl: spec.ctl, fam: spec.fam,
		}
		lo := *parentLo
		lo.world = world // rank 0's counts: the parent had one
		d.lo = &lo
		return d.open(ctx)
	}
}

// end aborts and closes a host connection that will not be used (nil: none).
func (k *control) end(err error) {
	if k != nil {
		k.abort(err)
		k.close()
	}
}

// helloTag is the tag of the hellos of a derived communicator on its host
// connection (envelopes use envTag; the library's own messages negative
// tags).
const helloTag = 2

// ctlExchange is the all-gather of a derived communicator's Open, over its
// host connection: each rank sends every other its blob's length (8 bytes)
// and then the blob.
type ctlExchange struct {
	ctl        *control
	rank, size int
}

// AllGather implements backend.Exchanger.
func (x ctlExchange) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	all := make([][]byte, x.size)
	all[x.rank] = data
	if x.size == 1 {
		return all, nil
	}
	tc := x.ctl.tc
	var head [8]byte
	binary.LittleEndian.PutUint64(head[:], uint64(len(data)))
	var sends []backend.Request
	defer func() {
		for _, r := range sends {
			r.Release()
		}
	}()
	for p := range x.size {
		if p == x.rank {
			continue
		}
		for _, b := range [][]byte{head[:], data} {
			r, err := tc.Isend(hostBytes(b), p, helloTag, 0)
			if err != nil {
				return nil, err
			}
			sends = append(sends, r)
		}
	}
	wait := func(r backend.Request) error {
		timeout := splitBound
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(dl), time.Millisecond)
		}
		_, err := r.Wait(timeout)
		r.Release()
		return err
	}
	for p := range x.size {
		if p == x.rank {
			continue
		}
		var n [8]byte
		r, err := tc.Irecv(hostBytes(n[:]), p, helloTag, 0)
		if err == nil {
			err = wait(r)
		}
		if err != nil {
			return nil, fmt.Errorf("the hello of rank %d: %w", p, err)
		}
		size := binary.LittleEndian.Uint64(n[:])
		if size > 1<<20 {
			return nil, fmt.Errorf("rank %d announced a hello of %d bytes", p, size)
		}
		all[p] = make([]byte, size)
		r, err = tc.Irecv(hostBytes(all[p]), p, helloTag, 0)
		if err == nil {
			err = wait(r)
		}
		if err != nil {
			return nil, fmt.Errorf("the hello of rank %d: %w", p, err)
		}
	}
	for _, r := range sends {
		if _, err := r.Wait(splitBound); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// hostBytes describes a byte slice (empty: a nil pointer).
func hostBytes(b []byte) backend.Buffer {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	return backend.Buffer{Ptr: p, Count: int64(len(b)), Type: backend.Uint8, Mem: backend.Host}
}
