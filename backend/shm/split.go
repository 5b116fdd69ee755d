package shm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// A pull of a user's large message is split with its sender: the receiver
// reads chunks out of the sender's memory from the front (process_vm_readv)
// while the sender, asked by a CTSHelp record, writes chunks into the
// receiver's buffer from the back (process_vm_writev), each byte copied
// once and both ranks copying at once. Which chunk is whose is settled in
// shared memory (shmem.Claims, beside each ring): neither waits for the
// other to start, so a sender busy elsewhere, or asleep, leaves the receiver
// to copy the whole message as a plain pull does, and one that comes in time
// halves the receiver's copy. A pipelined message also keeps both ranks
// copying, but moves each byte twice; a plain pull leaves the sender idle
// (on a 2-core AMD EPYC virtual machine a stream of 1 MiB messages moved
// 13-17 GB/s pulled, 22-25 pipelined: docs/benchmarks.md).
//
// The receiver owns the claims of the messages it pulls from a peer: those
// beside the ring the peer fills (in), in the receiver's inbox. It begins a
// range of chunks, sends CTSHelp with the range's generation, its buffer's
// address, the message's size and the chunk size, takes chunks from the
// front until none is left, then waits until the sender has finished those
// it took (or stopped short: the receiver copies what it left), and only
// then answers CTSDone, which completes the send: the sender never reads
// its buffer after that, and never writes the receiver's after the
// receive completes. A collective's message is not split: there every rank
// copies at once already.

// splitFrom is the smallest pulled message whose copy is split with its
// sender: the chooser's classes of larger messages (sizeClass above 0).
// On the 2-core AMD EPYC VM, streams of 256 KiB moved 30.0-31.3 GB/s
// split, 15.5-18.8 pipelined; of 128 KiB 14.5-17.7 and 13.5-18.6; of 64
// KiB 8.5-10.0 and 12.3-15.8 (docs/benchmarks.md).
const splitFrom = 128<<10 + 1

// splitStartMax is the largest message whose size class starts on the
// pull where pulls are split (chooser.hint).
const splitStartMax = 8 << 20

// splitChunkMin is the size of a split copy's chunks (larger for a message
// of more than shmem.MaxClaims of them): each is one system call.
const splitChunkMin = 256 << 10

// helpSize is what a CTSHelp record carries after its header: the
// receiver's buffer address, the message's bytes, the chunk size and the
// range's generation (8 bytes each, little endian).
const helpSize = 32

// helpReq is a CTSHelp record's request.
type helpReq struct {
	dst   uint64 // the receiver's buffer, in its process
	n     int64  // the message's bytes
	chunk int64  // the bytes of each chunk but the last
	gen   uint32 // the range's generation (shmem.Claims)
}

func (q *helpReq) encode(b *[helpSize]byte) {
	binary.LittleEndian.PutUint64(b[0:], q.dst)
	binary.LittleEndian.PutUint64(b[8:], uint64(q.n))
	binary.LittleEndian.PutUint64(b[16:], uint64(q.chunk))
	binary.LittleEndian.PutUint64(b[24:], uint64(q.gen))
}

// decodeHelp parses a CTSHelp record's request and checks it: a size and
// chunk that make 1 to shmem.MaxClaims chunks.
func decodeHelp(b []byte) (helpReq, error) {
	if len(b) != helpSize {
		return helpReq{}, fmt.Errorf("%w: CTSHelp record with %d bytes after its header, want %d", engine.ErrFrame, len(b), helpSize)
	}
	q := helpReq{
		dst:   binary.LittleEndian.Uint64(b[0:]),
		n:     int64(binary.LittleEndian.Uint64(b[8:])),
		chunk: int64(binary.LittleEndian.Uint64(b[16:])),
	}
	g := binary.LittleEndian.Uint64(b[24:])
	q.gen = uint32(g)
	if q.n <= 0 || q.chunk <= 0 || g != uint64(q.gen) || (q.n-1)/q.chunk >= shmem.MaxClaims {
		return helpReq{}, fmt.Errorf("%w: CTSHelp for %d bytes in chunks of %d (generation %d)", engine.ErrFrame, q.n, q.chunk, g)
	}
	return q, nil
}

// chunks is how many chunks the request's message makes.
func (q *helpReq) chunks() int { return int((q.n-1)/q.chunk + 1) } // n + chunk - 1 may overflow

// splitChunk is the chunk size of a split copy of n bytes: splitChunkMin,
// or half the message (in whole pages) for one of less than two, or more
// for one of more than shmem.MaxClaims.
func splitChunk(n int) int {
	c := splitChunkMin
	if n < 2*c {
		return ((n+1)/2 + page - 1) &^ (page - 1)
	}
	for (n+c-1)/c > shmem.MaxClaims {
		c *= 2
	}
	return c
}

// canSplit reports whether a pull of n bytes with tag may be split with
// the sender, and if so takes the link's claims for it (pullSplit gives
// them back).
func (l *link) canSplit(n int, tag int) bool {
	return l.split && tag >= 0 && n >= splitFrom && l.claims != nil && l.splitting.CompareAndSwap(false, true)
}

// pullSplit copies the peer's message at addr (its id sid) into dst, the
// sender helping (see above). It returns the bytes copied: all of them, or
// an error.
func (l *link) pullSplit(dst []byte, addr, sid uint64) (int, error) {
	defer l.splitting.Store(false)
	chunk := splitChunk(len(dst))
	k := (len(dst) + chunk - 1) / chunk
	gen, err := l.claims.Begin(k)
	if err != nil {
		return shmem.ReadFrom(l.pid, dst, uintptr(addr))
	}
	l.askHelp(&engine.Header{Kind: engine.KindCTS, Flags: engine.CTSHelp, SID: sid},
		helpReq{dst: uint64(uintptrOf(dst)), n: int64(len(dst)), chunk: int64(chunk), gen: gen})
	if splitAsked != nil {
		splitAsked(l, k)
	}
	var rerr error
	for {
		i, ok := l.claims.TakeFront()
		if !ok {
			break
		}
		if rerr != nil {
			continue // take the rest, so that the sender stops
		}
		rerr = l.readChunk(dst, addr, l.splitChunkAt(i, k, true), chunk)
	}
	back := l.claims.Back()
	done, werr := l.awaitHelper(k - back)
	if rerr != nil {
		return 0, rerr
	}
	if werr != nil {
		return 0, werr
	}
	// The sender stopped short: what it took from back on, but for the
	// done it finished (the last, taken first), is this rank's.
	for i := back; i < k-done; i++ {
		if err := l.readChunk(dst, addr, l.splitChunkAt(i, k, true), chunk); err != nil {
			return 0, err
		}
	}
	return len(dst), nil
}

// readChunk reads chunk c of a split copy from the peer's memory at addr
// into dst.
func (l *link) readChunk(dst []byte, addr uint64, c, chunk int) error {
	off := c * chunk
	end := min(off+chunk, len(dst))
	_, err := shmem.ReadFrom(l.pid, dst[off:end], uintptr(addr)+uintptr(off))
	return err
}

// splitChunkAt maps claim i of a split copy of k chunks to the message's
// chunk: the rank of the pair with the lower number copies from the
// message's front and the other from its back, whichever is the receiver
// (owner: this rank is the receiver). So in a ping-pong each rank copies
// the same half of both buffers, which stays in its core's cache, one
// message after the other; had the receiver always taken the front, each
// rank's copies would have touched every line of both, half of them last
// written by the other core (on the 2-core AMD EPYC VM, a 1 MiB ping-pong
// took 64-75 µs one way so, 30-35 with the halves kept; streams moved as
// fast either way).
func (l *link) splitChunkAt(i, k int, owner bool) int {
	if (l.rank > l.h.e.Rank()) == owner {
		return i
	}
	return k - 1 - i
}

// Tests' hooks: splitAsked is called by a split pull once it has asked
// for help, before it takes a chunk (k: the chunks); writeTo is the
// helper's copy.
var (
	splitAsked func(l *link, k int)
	writeTo    = shmem.WriteTo
)

// askHelp writes a CTSHelp record, if out has room now and nothing waits
// in the outbox; otherwise the receiver copies the whole message itself.
func (l *link) askHelp(h *engine.Header, q helpReq) {
	var b [helpSize]byte
	q.encode(&b)
	l.wmu.Lock()
	ok := len(l.q) == 0 && !l.byeSent && l.put(h, b[:])
	l.wmu.Unlock()
	if ok {
		l.peerBell.Ring()
	}
}

// splitGrace is how long a receiver waits for the sender's chunk under way
// once the link has ended: a process that closed its side may still be
// finishing a copy into the receiver's buffer, which must not be handed back
// before.
const splitGrace = 100 * time.Millisecond

// awaitHelper waits until the sender has finished the took chunks it took,
// or stopped short, and returns how many it finished. It polls, pausing as
// the engine's waiters do, and sleeps a little between polls once the
// engine's spin budget is spent. A count above took is a corrupt peer;
// a link that ends is an error after splitGrace.
func (l *link) awaitHelper(took int) (int, error) {
	var start, ended time.Time
	for i := 0; ; i++ {
		done, stopped := l.claims.Helped()
		switch {
		case done > took:
			return 0, fmt.Errorf("%w: rank %d finished %d chunks of a split copy, having taken %d", engine.ErrFrame, l.rank, done, took)
		case done == took || stopped:
			return done, nil
		}
		if i&15 != 15 {
			l.h.e.SpinPause(i)
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		if l.dead.Load() {
			if ended.IsZero() {
				ended = now
			} else if now.Sub(ended) > splitGrace {
				return 0, fmt.Errorf("%w while rank %d copied part of a message", errLinkDown, l.rank)
			}
		}
		if now.Sub(start) < engine.SpinBudget {
			l.h.e.SpinPause(i)
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// help takes up a CTSHelp record from the peer, which is pulling send
// h.SID: it writes chunks of the send's payload into the peer's buffer
// from the back until none is left (or the link ends, or a write fails:
// then it says it stopped). A send no longer in flight, or a rank that
// cannot write the peer's memory, takes nothing. Called from drain, under
// rmu.
func (l *link) help(h *engine.Header, src *record) error {
	q, err := decodeHelp(src.b)
	if err != nil {
		return err
	}
	buf, ok := l.p.PulledSend(h.SID)
	if !ok || l.peerClaims == nil || !l.read.Load() {
		return nil
	}
	if int64(len(buf)) != q.n {
		return fmt.Errorf("%w: rank %d asks for help with %d bytes of a send of %d", engine.ErrFrame, l.rank, q.n, len(buf))
	}
	k, chunk := q.chunks(), int(q.chunk)
	for !l.dead.Load() {
		i, ok := l.peerClaims.TakeBack(q.gen, k)
		if !ok {
			break
		}
		off := l.splitChunkAt(i, k, false) * chunk
		end := min(off+chunk, len(buf))
		if _, err := writeTo(l.pid, uintptr(q.dst)+uintptr(off), buf[off:end]); err != nil {
			l.peerClaims.Stop()
			break
		}
		l.peerClaims.Finish()
		l.helped.Add(1)
	}
	return nil
}
