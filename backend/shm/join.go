package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// Local is a rank of this host, met over an authenticated unix socket.
type Local struct {
	Rank int
	Conn *net.UnixConn
}

// Sizes. A rank's inbox holds its bell on the first page and then one
// ring per other rank of the host; rings shrink as the host's ranks grow,
// so an inbox stays near inboxBudget.
//
// A ring's first pass is slower than the passes after it: each small
// message takes a line of its own, and a line no message has taken yet
// comes from memory, not from a cache (1-byte messages between 2 ranks,
// 0.2 µs more one way on a 2-core AMD VM until each ring had gone round
// once; docs/benchmarks.md, 2026-12-05, third session). maxRing is 2 MiB,
// 32768 small messages a pass, not 4: half the slow start, and no large
// message measured slower (they move in chunks of at most 256 KiB).
const (
	inboxBudget = 16 << 20
	maxRing     = 2 << 20
	minRing     = 64 << 10
	page        = 4096
	// maxEager bounds the messages copied whole through a ring; larger
	// ones are announced and then copied as Options.Copy says.
	maxEager = 64 << 10
	// maxEagerPull is maxEager between two ranks that can read each
	// other's memory: from there a message moves as the receiver
	// measures faster, pulled (one copy, by the kernel) or pipelined. On
	// the 2-core Intel machine of docs/benchmarks.md ("The host path on
	// an Intel 2-core machine", 2026-12-06) streams of 32 and 64
	// KiB messages moved 9.4-10.5 and 12.7-15.3 GB/s so, against 6.2-6.7
	// and 6.6-7.0 through the ring (Open MPI's vader, which reads with
	// the same call from 4 KiB: 12.7-13.7 and 16.4-18.0); 8 KiB made 16
	// KiB messages' ping-pong slower (5.4-7.7 µs against 4.1-5.3).
	maxEagerPull = 16 << 10
	// dataChunk bounds a DATA record of the pipelined copy: the sender
	// writes the next while the receiver copies the last out, both in
	// cache (docs/benchmarks.md, "The large-message copy").
	dataChunk = 64 << 10
	// From streamFrom bytes on, a pipelined message moves in records of
	// streamChunk, and the receiver copies them out with non-temporal
	// stores (shmem.CopyStream): its buffer is far larger than any cache,
	// so writing whole lines without reading them first, and leaving the
	// cache to the ring, wins (docs/benchmarks.md, "Streaming the large
	// copy out").
	streamFrom  = 4 << 20
	streamChunk = 256 << 10
)

const setupMagic = "CSM2"

// Copy says how a message larger than the eager limit moves.
type Copy uint8

const (
	// CopyAuto, the default: a collective's message moves single where
	// the kernel allows it (every rank sends and receives at once, so the
	// copy that costs each rank least is fastest: docs/benchmarks.md, "The
	// large-message copy"); a user's message moves whichever way the
	// receiver has measured to be faster on its link, pipelined or single
	// (two cores that share a cache pipeline faster; two that do not,
	// a single copy: "The copy of large messages, chosen as they move").
	CopyAuto Copy = iota
	// CopyPipelined: the sender writes the payload into the ring in
	// chunks while the receiver copies them out (two copies, pipelined,
	// both processes copying at once, each chunk still in cache when it
	// is read).
	CopyPipelined
	// CopySingle: the receiver copies the payload straight out of the
	// sender's memory (process_vm_readv, one copy, one process copying),
	// where the kernel allows it, and pipelined where it does not.
	CopySingle
)

// CopyEnv is the environment variable that chooses the copy of large
// messages: "auto" (the default), "pipelined" or "single".
const CopyEnv = "COURIER_SHM_COPY"

var copyNames = [...]string{CopyAuto: "auto", CopyPipelined: "pipelined", CopySingle: "single"}

// ParseCopy reads a value of CopyEnv; "" is the default. Anything else is
// an error that names the choices.
func ParseCopy(v string) (Copy, error) {
	return parseChoice[Copy](CopyEnv, v, copyNames[:], "want auto, pipelined or single")
}

// String is the mode's name, as CopyEnv spells it.
func (c Copy) String() string { return choiceName(c, copyNames[:], "copy") }

// parseChoice reads v, a value of the environment variable env, as one of
// names (its index); "" is the first. Anything else is an error matching
// backend.ErrInvalid that says want.
func parseChoice[T ~uint8](env, v string, names []string, want string) (T, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	for c, name := range names {
		if v == name {
			return T(c), nil
		}
	}
	return 0, fmt.Errorf("%w: %s=%q: %s", backend.ErrInvalid, env, v, want)
}

// choiceName is c's name in names, or kind(c) for a value without one.
func choiceName[T ~uint8](c T, names []string, kind string) string {
	if int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(c))
}

// CopyIn is how a sender copies a payload into the ring.
type CopyIn uint8

const (
	// CopyInStream, the default on processors other than Intel's: a
	// payload of streamInFrom bytes or more goes into the ring with
	// non-temporal stores (shmem.CopyStream, where the CPU has them),
	// which write whole lines without taking them from the core that read
	// them last, the receiver; the receiver then reads them from memory.
	// On the 2-core AMD machine of docs/benchmarks.md ("Copied into the
	// ring without taking its lines", 2026-12-05) that halved the one-way
	// time from 4 KiB to 1 MiB and took 64 KiB messages from 5-9 to 19-20
	// GB/s.
	CopyInStream CopyIn = iota
	// CopyInCache: every payload with ordinary stores, through the
	// sender's cache (the receiver takes the lines from it); the default
	// on Intel processors, where the stream lost: pipelined streams of 64
	// KiB, 1, 4 and 64 MiB moved 15.2-15.5, 15.9-16.1, 13.9-14.2 and
	// 13.1-13.3 GB/s so on the 16-core host of docs/benchmarks.md ("The
	// host path on an Intel 2-core machine", 2026-12-06), against
	// 11.6-11.8, 13.6, 10.7-11.3 and 10.6-11.0 with CopyInStream, and
	// were as fast or faster on the 2-core Intel VM.
	CopyInCache
)

// CopyInEnv is the environment variable that chooses CopyIn: "stream"
// or "cache"; unset, DefaultCopyIn.
const CopyInEnv = "COURIER_SHM_COPYIN"

// DefaultCopyIn is the CopyIn of an unset CopyInEnv: CopyInCache on Intel
// processors, CopyInStream on others.
func DefaultCopyIn() CopyIn {
	if shmem.IntelCPU() {
		return CopyInCache
	}
	return CopyInStream
}

var copyInNames = [...]string{CopyInStream: "stream", CopyInCache: "cache"}

// ParseCopyIn reads a value of CopyInEnv; "" is DefaultCopyIn. Anything
// else is an error that names the choices.
func ParseCopyIn(v string) (CopyIn, error) {
	if strings.TrimSpace(v) == "" {
		return DefaultCopyIn(), nil
	}
	return parseChoice[CopyIn](CopyInEnv, v, copyInNames[:], "want stream or cache")
}

// String is the mode's name, as CopyInEnv spells it.
func (c CopyIn) String() string { return choiceName(c, copyInNames[:], "copyin") }

// streamInFrom is the smallest payload CopyInStream copies with
// non-temporal stores (shmem.CopyStream copies smaller ones plainly).
const streamInFrom = 4096

// Options are Join's choices.
type Options struct {
	// Copy is how messages larger than the eager limit move.
	Copy Copy
	// CopyIn is how a sender copies payloads into the ring.
	CopyIn CopyIn
	// Fill is when the segments' pages are allocated and mapped: ahead,
	// the default, or at their first touch (PrefaultEnv=0).
	Fill shmem.Fill
	// NoSplit makes a receiver pull a user's large message alone, without
	// asking its sender to copy part of it (SplitEnv=0; split.go).
	NoSplit bool
}

// SplitEnv is the environment variable that says whether a pull of a
// user's large message is split with its sender ("1", the default: both
// ranks copy at once) or done by the receiver alone ("0").
const SplitEnv = "COURIER_SHM_SPLIT"

// ParseSplit reads a value of SplitEnv; "" is the default (split).
// Anything but a boolean is an error matching backend.ErrInvalid.
func ParseSplit(v string) (bool, error) {
	return parseSwitch(SplitEnv, v, "want 1 (the sender helps with a pull) or 0 (the receiver pulls alone)")
}

// PrefaultEnv is the environment variable that says whether the
// segments' pages are allocated and mapped ahead at Init ("1", the
// default) or at their first touch ("0": a faster Init and Close, and
// small messages about 0.15 µs slower; the test harnesses' jobs, which
// live for a moment, use it).
const PrefaultEnv = "COURIER_SHM_PREFAULT"

// ParseFill reads a value of PrefaultEnv; "" is the default (ahead).
// Anything but a boolean is an error matching backend.ErrInvalid.
func ParseFill(v string) (shmem.Fill, error) {
	ahead, err := parseSwitch(PrefaultEnv, v, "want 1 (pages ahead) or 0 (at first touch)")
	if err != nil || ahead {
		return shmem.FillAhead, err
	}
	return shmem.FillOnTouch, nil
}

// parseSwitch reads v, a value of the environment variable env, as a
// boolean; "" is true (every switch here is on by default). Anything else
// is an error matching backend.ErrInvalid that says want.
func parseSwitch(env, v, want string) (bool, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return true, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: %s", backend.ErrInvalid, env, v, want)
	}
	return on, nil
}

// setupMsg is what each rank tells each local peer, beside its inbox's
// file descriptor: where the peer's ring is in the inbox, where the probe
// pattern is in its memory, and where its collective area is in the inbox
// (0: none, when some rank of the job is on another host).
type setupMsg struct {
	ringOff, ringCap, probe, collOff uint64
}

const setupSize = 4 + 4*8

func (m setupMsg) encode() []byte {
	b := make([]byte, 0, setupSize)
	b = append(b, setupMagic...)
	b = binary.LittleEndian.AppendUint64(b, m.ringOff)
	b = binary.LittleEndian.AppendUint64(b, m.ringCap)
	b = binary.LittleEndian.AppendUint64(b, m.probe)
	return binary.LittleEndian.AppendUint64(b, m.collOff)
}

// parseSetup reads a peer's setup message; a malformed one is ErrCorrupt.
func parseSetup(b []byte) (setupMsg, error) {
	if len(b) != setupSize || string(b[:4]) != setupMagic {
		return setupMsg{}, fmt.Errorf("%w: not a courier shared-memory setup message", backend.ErrCorrupt)
	}
	return setupMsg{
		ringOff: binary.LittleEndian.Uint64(b[4:]),
		ringCap: binary.LittleEndian.Uint64(b[12:]),
		probe:   binary.LittleEndian.Uint64(b[20:]),
		collOff: binary.LittleEndian.Uint64(b[28:]),
	}, nil
}

// check says whether m, a peer's setup message, fits the peer's segment
// of segLen bytes as this rank's message mine expects: its ring (after
// the bell's page) and, when every rank is on this host, its collective
// area (page aligned) lie inside it. A message that does not is
// ErrCorrupt: a peer cannot make this rank map or read outside the
// segment.
func (m setupMsg) check(mine setupMsg, segLen int) error {
	n := uint64(segLen)
	if m.ringOff < page || m.ringOff > n || uint64(shmem.RingBytes(int(min(m.ringCap, 1<<30)))+shmem.ClaimsBytes) > n-m.ringOff {
		return fmt.Errorf("%w: ring at %d of %d bytes does not fit a segment of %d", backend.ErrCorrupt, m.ringOff, m.ringCap, segLen)
	}
	if (m.collOff == 0) != (mine.collOff == 0) {
		return fmt.Errorf("%w: the two ranks disagree on whether every rank is on this host", backend.ErrMismatch)
	}
	if mine.collOff != 0 && (m.collOff%page != 0 || m.collOff > n || n-m.collOff < collAreaSize) {
		return fmt.Errorf("%w: at %d in a segment of %d", errNoArea, m.collOff, segLen)
	}
	return nil
}

// claimsOff is where the claims of the split pulls through the ring at
// ringOff of capacity ringCap lie: right after the ring (a multiple of 128
// bytes into the segment, as the ring's start is).
func claimsOff(ringOff, ringCap int) int {
	return ringOff + shmem.RingBytes(ringCap)
}

// ringCap is the capacity of each ring of an inbox shared with n other ranks.
func ringCap(n int) int {
	c := maxRing
	for c > minRing && c*n > inboxBudget {
		c /= 2
	}
	return c
}

// Join builds the shared-memory links to locals and attaches them to e:
// each rank makes its inbox, passes it to every local peer over their
// socket (nothing is ever named in /dev/shm), maps theirs, and tests
// whether it may read their memory (for CopySingle). When locals are
// every other rank of the job, each inbox also holds the rank's collective
// area (Coll). The sockets stay open: their end tells that a peer is gone.
// The hub's goroutines start with Start.
func Join(ctx context.Context, e *engine.Engine, locals []Local, opts Options) (*Hub, error) {
	h := &Hub{e: e, stop: make(chan struct{}), kick: make(chan struct{}, 1), copy: opts.Copy, fill: opts.Fill, copyIn: opts.CopyIn}
	h.tick.Store(int64(progressTick))
	if len(locals) == 0 {
		return h, nil
	}
	shmem.EnableFastPublish() // before anything is published (internal/shm's fence.go)
	cap := ringCap(len(locals))
	rb := (shmem.RingBytes(cap) + shmem.ClaimsBytes + page - 1) &^ (page - 1)
	size := page + rb*len(locals)
	collOff := 0
	if len(locals)+1 == e.Size() {
		collOff, size = size, size+collAreaSize
	}
	seg, err := shmem.Create(fmt.Sprintf("courier-rank%d", e.Rank()), size, opts.Fill)
	if err != nil {
		return nil, err
	}
	h.inbox = seg
	mem := seg.Bytes()
	h.bell = shmem.NewBell((*uint32)(unsafe.Pointer(&mem[0])))
	h.links = make([]*link, len(locals))
	for i, lc := range locals {
		in, err := shmem.NewRing(mem[page+i*rb:page+(i+1)*rb], cap)
		if err != nil {
			seg.Close()
			return nil, err
		}
		off := page + i*rb
		claims, err := shmem.NewClaims(mem[claimsOff(off, cap):])
		if err != nil {
			seg.Close()
			return nil, err
		}
		h.links[i] = &link{h: h, rank: lc.Rank, uc: lc.Conn, in: in, claims: claims, split: !opts.NoSplit}
	}
	errs := make([]error, len(locals))
	var wg sync.WaitGroup
	for i := range locals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.meet(ctx, h.links[i], setupMsg{ringOff: uint64(page + i*rb), ringCap: uint64(cap), collOff: uint64(collOff)})
		}()
	}
	wg.Wait()
	seg.CloseFd()
	if err := errors.Join(errs...); err != nil {
		for _, l := range h.links {
			if l.peerSeg != nil {
				l.peerSeg.Close()
			}
		}
		seg.Close()
		return nil, err
	}
	for _, l := range h.links {
		l.p = e.Attach(l.rank, l)
	}
	if collOff != 0 {
		h.coll = newColl(h, mem[collOff:collOff+collAreaSize])
	}
	h.live.Store(int32(len(h.links)))
	e.AddPoller(h)
	return h, nil
}

// meet runs the setup with one peer.
func (h *Hub) meet(ctx context.Context, l *link, mine setupMsg) error {
	uc := l.uc
	if dl, ok := ctx.Deadline(); ok {
		uc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	defer uc.SetDeadline(time.Time{})
	fail := func(err error) error { return fmt.Errorf("shm: setting up with rank %d: %w", l.rank, err) }

	pid, err := peerPid(uc)
	if err != nil {
		return fail(err)
	}
	l.pid = pid
	mine.probe = uint64(shmem.ProbeAddr())
	sent := make(chan error, 1)
	go func() { sent <- shmem.SendFds(uc, mine.encode(), h.inbox.Fd()) }()
	var buf [setupSize]byte
	n, fds, rerr := shmem.RecvFds(uc, buf[:], 1)
	if serr := <-sent; serr != nil {
		closeFds(fds)
		return fail(serr)
	}
	if rerr != nil {
		return fail(rerr)
	}
	if len(fds) != 1 {
		closeFds(fds)
		return fail(errors.New("no segment received"))
	}
	theirs, err := parseSetup(buf[:n])
	if err != nil {
		closeFds(fds)
		return fail(err)
	}
	seg, err := shmem.Map(fds[0], h.fill)
	if err != nil {
		closeFds(fds)
		return fail(err)
	}
	seg.CloseFd()
	l.peerSeg = seg
	pm := seg.Bytes()
	if err := theirs.check(mine, len(pm)); err != nil {
		return fail(err)
	}
	out, err := shmem.AttachRing(pm[theirs.ringOff:])
	if err != nil {
		return fail(err)
	}
	l.out = out
	if l.peerClaims, err = shmem.NewClaims(pm[claimsOff(int(theirs.ringOff), int(theirs.ringCap)):]); err != nil {
		return fail(err)
	}
	l.peerBell = shmem.NewBell((*uint32)(unsafe.Pointer(&pm[0])))
	if mine.collOff != 0 {
		l.coll = newArea(pm[theirs.collOff : theirs.collOff+collAreaSize])
	}

	// Single copy: can this rank read the peer's memory? Each side tells
	// the other, so a sender offers its address only to a rank that can
	// read it.
	canRead := byte(0)
	if h.copy != CopyPipelined && shmem.CanReadFrom(pid, uintptr(theirs.probe)) == nil {
		canRead = 1
	}
	l.read.Store(canRead == 1)
	if _, err := uc.Write([]byte{canRead}); err != nil {
		return fail(err)
	}
	var ans [1]byte
	if _, err := uc.Read(ans[:]); err != nil {
		return fail(err)
	}
	l.pull = ans[0] == 1
	l.choose.split = l.split && l.pull && l.read.Load() && h.copy == CopyAuto
	// Both sides reach the same limit: each knows both answers.
	limit := maxEager
	if l.read.Load() && l.pull {
		limit = maxEagerPull
	}
	l.eager = int64(min(limit, int(theirs.ringCap)/8, int(mine.ringCap)/8))
	return nil
}

// Start starts the hub's goroutines: the progress goroutine and a watcher
// per link.
func (h *Hub) Start() {
	if len(h.links) == 0 {
		return
	}
	for _, l := range h.links {
		h.watchers.Add(1)
		h.e.Go(l.watch)
	}
	h.e.Go(h.progress)
}
