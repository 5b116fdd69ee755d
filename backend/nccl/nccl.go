// Package nccl is courier's GPU transport: point-to-point messages between
// GPUs through NCCL, one GPU per rank.
//
// It is registered as "nccl"; programs reach it through package mp
// (COURIER_BACKEND=nccl, or "auto", which prefers it when a GPU and
// libnccl are present). libnccl.so.2 (or $COURIER_NCCL_LIBRARY) is loaded
// at run time, so the package builds and links everywhere; where NCCL or a
// GPU is missing, or in a build without cgo, Available and Open return an
// error matching backend.ErrNotSupported that says why.
//
// # What a rank gets
//
// Each rank uses one GPU: the one of its local rank ($COURIER_DEVICE
// overrides). Open makes a channel for each direction between this rank
// and every other: an NCCL communicator of two ranks with its own CUDA
// stream, connected before Open returns. It also opens a host connection
// (a tcp communicator) beside them, first, so that a rank that never comes
// is found before NCCL is involved. conn's documentation says why
// channels, and how operations move.
//
// The communicators are blocking ones by default: NCCL 2.28's non-blocking
// communicators hand every ncclGroupEnd to a thread of their own and cost
// about 4 ms per group, in C as from courier (docs/benchmarks.md), against
// a few microseconds. Every blocking call that waits for a peer (creation
// and first contact, in Open) runs on a goroutine of its own, bounded by
// Open's context: a peer that never answers makes Open fail rather than
// hang (the call itself is left behind). COURIER_NCCL_BLOCKING=0 selects
// non-blocking communicators, whose creation NCCL can abort.
//
// # Semantics
//
//   - Isend and Irecv queue; any Wait, Test or Done issues what is queued,
//     as one NCCL group per channel.
//   - Without checks, messages from one rank are received in the order
//     they were sent, whatever their tags (NCCL has none), and a receive
//     must ask for the message's exact size and type: NCCL silently cuts a
//     longer message short and never completes a receive of a shorter one.
//     This is the fast path: nothing but NCCL moves per message.
//   - With checks (Config.Check, COURIER_CHECK=1) every message's envelope
//     (sequence number, tag, element type, count) travels over the host
//     connection when its send is posted. Receives then match as in MPI
//     (the oldest message from the source with the tag), ask NCCL for
//     exactly the message, and a mismatch (ErrMismatch, ErrTruncate) names
//     both ranks, leaves the user's buffer alone and keeps the
//     communicator usable: the seed's 1000-element send into a 500-element
//     receive is an error, never garbage. Small unmatched messages are
//     received early, so blocking sends of them complete before their
//     receive is posted, as on the tcp backend.
//   - AnySource and AnyTag are ErrNotSupported.
//   - Messages to oneself are matched by tag in memory and copied (host or
//     device), never through NCCL; a send to oneself completes at once.
//   - Messages with negative tags (the library's own, such as mp.Barrier's)
//     travel over the host connection, so no user receive can take them.
//   - Device buffers (backend.Device) go to NCCL as they are; host buffers
//     are staged through page-locked memory with copies on the channel's
//     stream.
//   - A rank that closes, aborts or dies is noticed through the host
//     connection: operations with it end with ErrPeerLost (what it sent
//     before leaving can still be received).
//   - WaitOn makes a CUDA stream wait for a request on the GPU.
package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

func init() { backend.Register("nccl", Driver{}) }

const (
	// LibraryEnv names the variable that overrides the library's path.
	LibraryEnv = "COURIER_NCCL_LIBRARY"
	// DefaultLibrary is the library loaded when LibraryEnv is unset.
	DefaultLibrary = "libnccl.so.2"
	// DeviceEnv names the variable that picks the GPU (an ordinal),
	// instead of the local rank.
	DeviceEnv = backend.DeviceEnv
	// BlockingEnv names the variable that chooses the kind of NCCL
	// communicator: 1 or unset, blocking ones (a group is launched in the
	// calling thread; the default), 0, non-blocking ones (each
	// ncclGroupEnd goes to a thread NCCL starts for it, which costs
	// milliseconds per group in NCCL 2.28, but NCCL can abort their
	// creation). Anything else makes Open fail with ErrInvalid.
	BlockingEnv = "COURIER_NCCL_BLOCKING"
	// EventsEnv names the variable that, set to 1, makes the backend tell
	// that a group is done by querying a CUDA event recorded after it,
	// instead of by reading the word its channel's stream writes into
	// page-locked memory after it (the default where the driver can write
	// one: a memory load instead of a driver call per poll). For
	// comparisons; anything but 0, 1 or unset makes Open fail with
	// ErrInvalid.
	EventsEnv = "COURIER_NCCL_EVENTS"
	// SharedStreamEnv names the variable that, set to 0, keeps each
	// direction between two ranks on a CUDA stream of its own. By default
	// (1 or unset) the two directions also share a stream, which they use
	// whenever that cannot make one wait for the other (a ping-pong is
	// faster on one stream). For comparisons; anything but 0, 1 or unset
	// makes Open fail with ErrInvalid.
	SharedStreamEnv = "COURIER_NCCL_SHARED_STREAM"
	// CollectivesEnv names the variable that, set to 0 on rank 0, makes
	// Open skip the NCCL communicator of every rank, which runs the
	// collectives (mp.Allreduce, …): they then run over point-to-point
	// messages, host memory and the host connection, as on tcp. By
	// default (1 or unset) Open makes it beside the channels. Rank 0's
	// setting decides for every rank; anything but 0, 1 or unset makes
	// Open fail with ErrInvalid.
	CollectivesEnv = "COURIER_NCCL_COLLECTIVES"
	// minVersion is the oldest NCCL the backend works with:
	// non-blocking communicators and ncclCommFinalize came in 2.14.
	minVersion = 21400
)

// Driver opens NCCL communicators. It implements backend.Driver and
// backend.Availability.
type Driver struct{}

// libraryPath is the library to load, as getenv sees LibraryEnv.
func libraryPath(getenv func(string) string) string {
	if p := strings.TrimSpace(getenv(LibraryEnv)); p != "" {
		return p
	}
	return DefaultLibrary
}

// libs caches loaded libraries by path: a library is loaded once per
// process and never unloaded.
var libs struct {
	sync.Mutex
	m map[string]libResult
}

type libResult struct {
	l   *library
	err error
}

// loadLibrary loads the NCCL library at path (once per process) and
// checks its version.
func loadLibrary(path string) (*library, error) {
	libs.Lock()
	defer libs.Unlock()
	if r, ok := libs.m[path]; ok {
		return r.l, r.err
	}
	l, err := openLibrary(path)
	if err == nil && l.version < minVersion {
		err = fmt.Errorf("nccl: %w: %s is NCCL %s; courier needs %s or later",
			backend.ErrNotSupported, path, versionString(l.version), versionString(minVersion))
		l = nil
	}
	if libs.m == nil {
		libs.m = make(map[string]libResult)
	}
	libs.m[path] = libResult{l, err}
	return l, err
}

// versionString spells an NCCL version code ("2.28.3").
func versionString(v int) string {
	if v < 10000 { // before 2.9: X*1000 + Y*100 + Z
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// Version loads NCCL ($COURIER_NCCL_LIBRARY, or libnccl.so.2) and returns
// its version ("2.28.3") and the path it was loaded from. The error
// matches backend.ErrNotSupported when it cannot be loaded.
func Version() (version, path string, err error) {
	path = libraryPath(os.Getenv)
	l, err := loadLibrary(path)
	if err != nil {
		return "", path, err
	}
	return versionString(l.version), path, nil
}

// notSupported turns a CUDA failure into the reason the backend is not
// available here.
func notSupported(err error) error {
	if errors.Is(err, backend.ErrNotSupported) {
		return fmt.Errorf("nccl: %w", err)
	}
	return fmt.Errorf("nccl: %w: CUDA does not work here: %w", backend.ErrNotSupported, err)
}

// gpus checks that CUDA works and returns the number of devices.
func gpus() (int, error) {
	if err := cuda.Init(); err != nil {
		return 0, notSupported(err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0, notSupported(err)
	}
	if n == 0 {
		return 0, fmt.Errorf("nccl: %w: no CUDA device", backend.ErrNotSupported)
	}
	return n, nil
}

// Available implements backend.Availability: nil when CUDA works, there is
// a GPU, and NCCL loads; otherwise an error matching
// backend.ErrNotSupported that says which is missing.
func (Driver) Available() error {
	if _, err := gpus(); err != nil {
		return err
	}
	_, err := loadLibrary(libraryPath(os.Getenv))
	return err
}

// pickDevice chooses this rank's GPU among n (backend.PickDevice).
func pickDevice(cfg backend.Config, n int) (cuda.Device, error) {
	d, err := backend.PickDevice(cfg, n)
	if err != nil {
		return 0, fmt.Errorf("nccl: %w", err)
	}
	return cuda.Device(d), nil
}

// local is what a rank sets up before it meets the others.
type local struct {
	lib   *library
	dev   cuda.Device
	hooks *devHooks
	host  string
	bus   string
	// ids[p] is the NCCL unique ID of the channel from this rank to rank
	// p (zero at this rank).
	ids [][idBytes]byte
}

// setupLocal loads NCCL, picks and prepares the GPU, and creates the NCCL
// unique IDs of the channels this rank sends on.
func setupLocal(cfg backend.Config) (*local, error) {
	lib, err := loadLibrary(libraryPath(cfg.Getenv))
	if err != nil {
		return nil, err
	}
	n, err := gpus()
	if err != nil {
		return nil, err
	}
	dev, err := pickDevice(cfg, n)
	if err != nil {
		return nil, err
	}
	lo := &local{lib: lib, dev: dev, ids: make([][idBytes]byte, cfg.Job.Size)}
	world, err := collectivesMode(cfg.Getenv)
	if err != nil {
		return nil, err
	}
	lo.host, _ = os.Hostname()
	lo.bus, _ = dev.PCIBusID()
	if lo.hooks, err = newDevHooks(dev); err != nil {
		return nil, fmt.Errorf("nccl: preparing %v: %w", dev, err)
	}
	for p := range lo.ids {
		// Rank 0's own entry is the ID of the communicator of every rank
		// (zero: none).
		if p != cfg.Job.Rank || p == 0 && world && cfg.Job.Size > 1 {
			if lo.ids[p], err = lib.uniqueID(); err != nil {
				return nil, err
			}
		}
	}
	return lo, nil
}

// The hello each rank contributes to the exchange: a status byte, then
// either the reason it cannot join, or its host name, its GPU's PCI
// address and the NCCL unique IDs of its send channels (one per rank,
// zeros for itself; rank 0 has the ID of the communicator of every rank
// there, or zeros for none).
const (
	helloOK          = 0
	helloUnsupported = 1 // the reason matches ErrNotSupported
	helloFailed      = 2
)

func encodeHello(lo *local, err error) []byte {
	if err != nil {
		st := byte(helloFailed)
		if errors.Is(err, backend.ErrNotSupported) {
			st = helloUnsupported
		}
		return append([]byte{st}, err.Error()...)
	}
	b := []byte{helloOK}
	for _, s := range []string{lo.host, lo.bus} {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	for _, id := range lo.ids {
		b = append(b, id[:]...)
	}
	return b
}

type hello struct {
	host, bus string
	ids       [][idBytes]byte
}

// decodeHello reads rank k's hello in a job of size ranks; an error says
// why rank k cannot join.
func decodeHello(k, size int, b []byte) (hello, error) {
	var h hello
	if len(b) == 0 {
		return h, fmt.Errorf("nccl: rank %d sent an empty hello", k)
	}
	switch b[0] {
	case helloUnsupported:
		return h, fmt.Errorf("nccl: %w: rank %d cannot join: %s", backend.ErrNotSupported, k, b[1:])
	case helloFailed:
		return h, fmt.Errorf("nccl: rank %d cannot join: %s", k, b[1:])
	case helloOK:
	default:
		return h, fmt.Errorf("nccl: rank %d sent a hello of kind %d", k, b[0])
	}
	b = b[1:]
	var fields [2]string
	for i := range fields {
		if len(b) < 2 {
			return h, fmt.Errorf("nccl: rank %d sent a short hello", k)
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return h, fmt.Errorf("nccl: rank %d sent a short hello", k)
		}
		fields[i] = string(b[2 : 2+n])
		b = b[2+n:]
	}
	h.host, h.bus = fields[0], fields[1]
	if len(b) != size*idBytes {
		return h, fmt.Errorf("nccl: rank %d sent %d bytes of NCCL unique IDs, want %d", k, len(b), size*idBytes)
	}
	h.ids = make([][idBytes]byte, size)
	for p := range h.ids {
		copy(h.ids[p][:], b[p*idBytes:])
	}
	return h, nil
}

// Open implements backend.Driver. Every rank sets up its GPU and tells
// the others, with the NCCL unique IDs of the channels it sends on (one
// per other rank: the sender of a channel makes its ID), through
// cfg.Exchange; if any rank cannot join, every rank fails with its reason.
// The ranks then open the host connection (a second AllGather), create an
// NCCL communicator of two ranks for each direction between two ranks (all
// at once; bounded by ctx), and connect every channel with a one-byte
// message. Meanwhile each rank sets up its completion words.
func (Driver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	openStart := time.Now()
	traced := cfg.Getenv("COURIER_NCCL_TRACE") != ""
	// phase prints how long Open has taken when COURIER_NCCL_TRACE is set.
	phase := func(what string) {
		if traced {
			fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: Open: %s after %v\n", cfg.Job.Rank, what, time.Since(openStart))
		}
	}
	job := cfg.Job
	if job.Size < 1 || job.Rank < 0 || job.Rank >= job.Size {
		return nil, fmt.Errorf("%w: rank %d of %d", backend.ErrInvalid, job.Rank, job.Size)
	}
	// Every rank's own failure goes into its hello, so that all fail
	// together.
	blocking, lerr := blockingMode(cfg.Getenv)
	var events, share bool
	if lerr == nil {
		events, lerr = eventsMode(cfg.Getenv)
	}
	if lerr == nil {
		share, lerr = sharedStreamMode(cfg.Getenv)
	}
	var lo *local
	if lerr == nil {
		lo, lerr = setupLocal(cfg)
	}
	phase("CUDA and NCCL loaded, GPU set up")
	all, err := cfg.Exchange.AllGather(ctx, encodeHello(lo, lerr))
	phase("the unique IDs exchanged")
	if lerr != nil {
		return nil, lerr
	}
	if err == nil && len(all) != job.Size {
		err = fmt.Errorf("nccl: the exchange returned %d hellos for %d ranks", len(all), job.Size)
	}
	if err != nil {
		return nil, fmt.Errorf("nccl: exchanging the NCCL unique IDs: %w", err)
	}
	hellos := make([]hello, job.Size)
	for k, b := range all {
		if hellos[k], err = decodeHello(k, job.Size, b); err != nil {
			return nil, err
		}
	}
	for k := range hellos {
		if k != job.Rank && hellos[k].host == lo.host && hellos[k].bus == lo.bus && lo.bus != "" {
			return nil, fmt.Errorf("nccl: %w: ranks %d and %d would both use the GPU at %s on %s: one GPU per rank (set %s, or run fewer ranks per host)",
				backend.ErrInvalid, min(k, job.Rank), max(k, job.Rank), lo.bus, lo.host, DeviceEnv)
		}
	}

	world := job.Size > 1 && hellos[0].ids[0] != [idBytes]byte{}
	eng := &device{
		lib: lo.lib, hooks: lo.hooks, dev: lo.dev,
		rank:     job.Rank,
		size:     job.Size,
		blocking: blocking,
		timed:    traced,
		comms:    make([]uintptr, 2*job.Size+1),
		streams:  make([]*cuda.Stream, 2*job.Size+1),
	}
	fail := func(err error, ctl *control) (backend.Conn, error) {
		if ctl != nil { // the others first: an abort may wait for its peer's
			ctl.abort(err)
			ctl.close()
		}
		if aerr := eng.close(); aerr != nil {
			err = joinAbort(err, aerr)
		}
		return nil, err
	}
	var ctl *control
	if job.Size > 1 {
		for p := range job.Size {
			if p == job.Rank {
				continue
			}
			for _, ch := range []int{sendChan(p), recvChan(p)} {
				if eng.streams[ch], err = cuda.NewStream(lo.dev); err != nil {
					return fail(fmt.Errorf("nccl: creating a stream on %v: %w", lo.dev, err), nil)
				}
			}
		}
		if world {
			if eng.streams[worldChan(job.Size)], err = cuda.NewStream(lo.dev); err != nil {
				return fail(fmt.Errorf("nccl: creating a stream on %v: %w", lo.dev, err), nil)
			}
		}
		if share {
			// Given to the engine first, so that fail's close destroys
			// those made if one fails.
			eng.setShared(make([]*cuda.Stream, job.Size))
			for p := range job.Size {
				if p == job.Rank {
					continue
				}
				if eng.shared[p], err = cuda.NewStream(lo.dev); err != nil {
					return fail(fmt.Errorf("nccl: creating a stream on %v: %w", lo.dev, err), nil)
				}
			}
		}
		if eng.warm, err = cuda.Alloc[byte](lo.dev, int64(2*job.Size)); err != nil {
			return fail(fmt.Errorf("nccl: allocating the connection buffers: %w", err), nil)
		}
		// The completion words are set up while the ranks meet and NCCL
		// creates the communicators (page-locked memory takes a while to
		// allocate); joinFlags waits for that, once, before anything
		// else touches the engine's memory.
		flagsDone := make(chan error, 1)
		if events {
			flagsDone <- errors.New(EventsEnv + "=1")
		} else {
			go func() { flagsDone <- eng.useFlags(len(eng.comms), eng.streams[sendChan((job.Rank+1)%job.Size)]) }()
		}
		var joined bool
		joinFlags := func() {
			if joined {
				return
			}
			joined = true
			if ferr := <-flagsDone; ferr != nil {
				phase("completion by events: " + ferr.Error())
			} else {
				phase("completion by words in page-locked memory")
			}
		}
		if ctl, err = openControl(ctx, cfg); err != nil {
			joinFlags()
			return fail(err, nil)
		}
		phase("the host connection open")
		if err = initComms(ctx, eng, job.Rank, job.Size, hellos); err != nil {
			joinFlags()
			return fail(err, ctl)
		}
		phase("the NCCL communicators made")
		joinFlags()
	}
	var tr *traceStats
	if traced {
		tr = &traceStats{}
	}
	c := newConn(connOptions{
		rank: job.Rank, size: job.Size, dev: int(lo.dev), check: cfg.Check,
		eng: eng, ctl: ctl, trace: tr, world: world,
	})
	base := eng.warm.Ptr()
	if eng.blocking {
		err = eng.connectBlocking(ctx, job.Rank, job.Size)
	} else {
		err = c.connectAll(ctx, func(p int) (send, recv op) {
			send = op{peer: p, typ: backend.Uint8, count: 1, addr: base}
			recv = op{peer: p, recv: true, typ: backend.Uint8, count: 1, addr: base + uintptr(1+p)}
			return send, recv
		})
	}
	if err != nil {
		c.Abort(err)
		c.Close()
		return nil, err
	}
	phase("every channel connected")
	if world {
		c.startWarm(eng.worldWarmer)
	}
	return c, nil
}

// collectivesMode reads CollectivesEnv: whether Open makes the
// communicator of every rank.
func collectivesMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, CollectivesEnv, true, "NCCL runs the collectives", "they run over point-to-point messages")
}

// blockingMode reads BlockingEnv: whether the channels are blocking
// communicators.
func blockingMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, BlockingEnv, true, "blocking communicators", "non-blocking ones")
}

// eventsMode reads EventsEnv: whether completion is told by events.
func eventsMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, EventsEnv, false, "completion told by CUDA events", "by words in page-locked memory")
}

// sharedStreamMode reads SharedStreamEnv: whether the two channels of a
// pair of ranks share a stream where they can.
func sharedStreamMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, SharedStreamEnv, true, "the directions of a pair share a stream where they can", "a stream per direction")
}

// envSwitch reads the variable name as 1 (true), 0 (false) or unset (def);
// anything else is an error matching ErrInvalid that says what 1 and 0
// mean (on and off) and which is the default.
func envSwitch(getenv func(string) string, name string, def bool, on, off string) (bool, error) {
	switch v := strings.TrimSpace(getenv(name)); v {
	case "":
		return def, nil
	case "1":
		return true, nil
	case "0":
		return false, nil
	default:
		if def {
			on += ", the default"
		} else {
			off += ", the default"
		}
		return false, fmt.Errorf("nccl: %w: %s=%q: want 1 (%s) or 0 (%s)", backend.ErrInvalid, name, v, on, off)
	}
}

// initComms creates the NCCL communicator of every channel: for each
// other rank p, the channel from this rank to p (this rank is its NCCL
// rank 0, with the ID this rank made) and the one from p (NCCL rank 1,
// with p's ID). They start at once: blocking ones each on a goroutine
// (initBlocking), non-blocking ones polled until ready. If ctx ends first
// (a rank never came, or failed on its way), the caller aborts them.
func initComms(ctx context.Context, d *device, rank, size int, hellos []hello) error {
	if d.blocking {
		return initBlocking(ctx, d, rank, size, hellos)
	}
	for _, c := range channelSpecs(rank, size, hellos) {
		comm, err := d.lib.initComm(d.hooks, c.nranks, c.nrank, c.id, false)
		d.comms[c.ch] = comm
		if err != nil {
			return fmt.Errorf("nccl: creating %s: %w", chanName(c.ch, size), err)
		}
	}
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		pending := 0
		for ch, comm := range d.comms {
			if comm == 0 {
				continue
			}
			inProgress, err := d.lib.asyncState(comm)
			if err != nil {
				return fmt.Errorf("nccl: creating %s: %w", chanName(ch, size), err)
			}
			if inProgress {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nccl: ncclCommInitRankConfig (rank %d of %d on %v: %d of its channels not ready) did not finish: did every rank start, on its own GPU? %w",
				rank, size, d.dev, pending, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// initBlocking is initComms with blocking communicators
// (COURIER_NCCL_BLOCKING=1): each one's ncclCommInitRankConfig returns only
// when the peer has joined it, so each runs on a goroutine (and thread) of
// its own, all at once. If ctx ends first, Open fails and the calls still
// blocked are left to finish or not (a blocking init cannot be aborted).
func initBlocking(ctx context.Context, d *device, rank, size int, hellos []hello) error {
	type result struct {
		ch   int
		comm uintptr
		err  error
	}
	results := make(chan result, 2*size)
	specs := channelSpecs(rank, size, hellos)
	for _, c := range specs {
		go func() {
			comm, err := d.lib.initComm(d.hooks, c.nranks, c.nrank, c.id, true)
			results <- result{c.ch, comm, err}
		}()
	}
	n := len(specs)
	var errs []error
	for range n {
		select {
		case r := <-results:
			d.comms[r.ch] = r.comm
			if r.err != nil {
				errs = append(errs, fmt.Errorf("nccl: creating %s: %w", chanName(r.ch, size), r.err))
			}
		case <-ctx.Done():
			return fmt.Errorf("nccl: ncclCommInitRankConfig (blocking, rank %d of %d on %v) did not finish: did every rank start, on its own GPU? %w",
				rank, size, d.dev, ctx.Err())
		}
	}
	return errors.Join(errs...)
}

// channelSpec is what creating one channel's communicator takes: the
// channel, its number of ranks and this rank's NCCL rank in it (on a
// channel, 0 on its sends to a rank, 1 on its receives from it), and the
// unique ID (the sender's; rank 0's for the communicator of every rank).
type channelSpec struct {
	ch, nranks, nrank int
	id                [idBytes]byte
}

// channelSpecs lists this rank's channels, two per other rank, and the
// communicator of every rank if rank 0 made its ID.
func channelSpecs(rank, size int, hellos []hello) []channelSpec {
	var out []channelSpec
	for p := range size {
		if p != rank {
			out = append(out,
				channelSpec{sendChan(p), 2, 0, hellos[rank].ids[p]},
				channelSpec{recvChan(p), 2, 1, hellos[p].ids[rank]})
		}
	}
	if id := hellos[0].ids[0]; size > 1 && id != [idBytes]byte{} {
		out = append(out, channelSpec{worldChan(size), size, rank, id})
	}
	return out
}

// chanName names channel ch of a job of size ranks, for errors.
func chanName(ch, size int) string {
	switch {
	case ch == worldChan(size):
		return "the communicator of every rank"
	case ch%2 == 1:
		return fmt.Sprintf("the channel from rank %d", chanPeer(ch))
	}
	return fmt.Sprintf("the channel to rank %d", chanPeer(ch))
}
