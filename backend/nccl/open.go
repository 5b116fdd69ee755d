package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Open implements backend.Driver. Every rank sets up its GPU and tells
// the others, with the NCCL unique IDs of the channels it sends on (one
// per other rank: the sender of a channel makes its ID), through
// cfg.Exchange; if any rank cannot join, every rank fails with its reason.
// The ranks then open the host connection (a second AllGather), create an
// NCCL communicator of two ranks for each direction between two ranks (all
// at once; bounded by ctx), and connect every channel with a one-byte
// message. Meanwhile each rank sets up its completion words.
//
// Its phases, each a method of opening below: meet (this rank's setup and
// the hellos), newEngine, makeChannels (streams, buffers, completion
// words, the host connection, the NCCL communicators), makeConn, connect
// (first contact), then the background connection of the communicator of
// every rank (startWarm). A phase that fails undoes what the earlier ones
// made.
func (Driver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	o, err := newOpening(cfg)
	if err != nil {
		return nil, err
	}
	return o.open(ctx)
}

// open runs the phases (Open's, and a derived communicator's: then o.lo
// and o.ctl are given, and cfg.Exchange runs over o.ctl).
func (o *opening) open(ctx context.Context) (*conn, error) {
	if err := o.meet(ctx); err != nil {
		o.ctl.end(err)
		return nil, err
	}
	o.newEngine()
	if err := o.makeChannels(ctx); err != nil {
		return nil, o.fail(err)
	}
	c := o.makeConn()
	if err := o.connect(ctx, c); err != nil {
		c.Abort(err)
		c.Close()
		return nil, err
	}
	o.trace.phase("every channel connected")
	if o.world {
		c.startWarm(o.eng.worldWarmer)
	}
	return c, nil
}

// opening is an Open under way: what its phases have made so far.
type opening struct {
	cfg        backend.Config
	rank, size int
	trace      openTrace
	// The modes (env.go): blocking communicators, completion told by
	// events, a stream shared by the two channels of a pair.
	blocking, events, share bool
	lo                      *local
	hellos                  []hello
	ipc                     []bool   // by rank: the pair meets through CUDA IPC (nil: none does)
	ipcMem                  *cudaIPC // the IPC path's memory side (nil: no pair)
	world                   bool     // there is a communicator of every rank
	eng                     *device
	ctl                     *control
	fam                     *family // a derived communicator's parent's (nil: a new one)
}

// newOpening checks the job and starts Open's trace.
func newOpening(cfg backend.Config) (*opening, error) {
	job := cfg.Job
	o := &opening{cfg: cfg, rank: job.Rank, size: job.Size, trace: newOpenTrace(cfg.Getenv, job.Rank)}
	if job.Size < 1 || job.Rank < 0 || job.Rank >= job.Size {
		return nil, fmt.Errorf("%w: rank %d of %d", backend.ErrInvalid, job.Rank, job.Size)
	}
	return o, nil
}

// meet sets this rank up (setup) and exchanges hellos with the others
// (hello.go). Every rank's own failure goes into its hello, so that all
// fail together. From the hellos it learns which pairs share a GPU (and
// refuses them where IPCEnv is off), and whether there is a communicator
// of every rank (rank 0 asks for one; none when ranks share a GPU). Then,
// unless every pair shares a GPU, the ranks exchange the NCCL unique IDs
// of the communicators that will be made, and only those (hello.go).
func (o *opening) meet(ctx context.Context) error {
	var lerr error
	if o.lo == nil { // a derived communicator's is its parent's
		lerr = o.setup()
		o.trace.phase("CUDA and NCCL loaded, GPU set up")
	}
	all, err := o.gather(ctx, encodeHello(o.lo, lerr), "hellos")
	o.trace.phase("the hellos exchanged")
	if lerr != nil {
		return lerr
	}
	if err != nil {
		return err
	}
	o.hellos = make([]hello, o.size)
	for k, b := range all {
		if o.hellos[k], err = decodeHello(k, b); err != nil {
			return err
		}
	}
	if o.ipc, err = ipcPairs(o.rank, o.hellos); err != nil {
		return err
	}
	o.world = o.size > 1 && o.hellos[0].world && !sharesGPU(o.hellos)
	if !ncclPairs(o.hellos) {
		for k := range o.hellos {
			o.hellos[k].ids = make([][idBytes]byte, o.size)
		}
		return nil
	}
	ids, lerr := o.lo.makeIDs(o.rank, o.hellos, o.world)
	all, err = o.gather(ctx, encodeIDs(ids, lerr), "NCCL unique IDs")
	o.trace.phase("the unique IDs exchanged")
	if lerr != nil {
		return lerr
	}
	if err != nil {
		return err
	}
	for k, b := range all {
		if o.hellos[k].ids, err = decodeIDs(k, o.size, b); err != nil {
			return err
		}
	}
	return nil
}

// gather is one round of Open's exchange, what naming what is exchanged.
func (o *opening) gather(ctx context.Context, data []byte, what string) ([][]byte, error) {
	all, err := o.cfg.Exchange.AllGather(ctx, data)
	if err == nil && len(all) != o.size {
		err = fmt.Errorf("the exchange returned %d parts for %d ranks", len(all), o.size)
	}
	if err != nil {
		return nil, fmt.Errorf("nccl: exchanging the %s: %w", what, err)
	}
	return all, nil
}

// ncclPairs reports whether some pair of ranks does not share a GPU: it
// meets through NCCL, and the ranks need unique IDs.
func ncclPairs(hellos []hello) bool {
	for i := range hellos {
		for j := range i {
			if !sameGPU(hellos[i], hellos[j]) {
				return true
			}
		}
	}
	return false
}

// ipcPairs returns, by rank, whether rank shares its GPU with that one
// (the IPC path's pairs), or nil when it shares it with none. A pair
// where either rank has IPCEnv off is refused.
func ipcPairs(rank int, hellos []hello) ([]bool, error) {
	// Every rank checks every pair, so that all refuse together (a rank
	// outside the pair must not wait in the next round for ranks that
	// gave up).
	for i, a := range hellos {
		for j, b := range hellos[:i] {
			if sameGPU(a, b) && (!a.ipc || !b.ipc) {
				return nil, fmt.Errorf("nccl: %w: ranks %d and %d would both use the GPU at %s on %s, and %s=0 turns off the CUDA IPC path they would meet through: one GPU per rank (set %s, run fewer ranks per host, or unset %s)",
					backend.ErrInvalid, j, i, a.bus, a.host, IPCEnv, DeviceEnv, IPCEnv)
			}
		}
	}
	var on []bool
	me := hellos[rank]
	for k, h := range hellos {
		if k == rank || !sameGPU(h, me) {
			continue
		}
		if on == nil {
			on = make([]bool, len(hellos))
		}
		on[k] = true
	}
	return on, nil
}

// sameGPU reports whether two ranks' hellos name one GPU.
func sameGPU(a, b hello) bool { return a.bus != "" && a.host == b.host && a.bus == b.bus }

// sharesGPU reports whether any two ranks of the job share a GPU: NCCL
// cannot then make the communicator of every rank, and the collectives
// run over point-to-point messages.
func sharesGPU(hellos []hello) bool {
	for i := range hellos {
		for j := range i {
			if sameGPU(hellos[i], hellos[j]) {
				return true
			}
		}
	}
	return false
}

// setup reads the modes and sets up this rank's side (setupLocal).
func (o *opening) setup() error {
	var err error
	if o.blocking, err = blockingMode(o.cfg.Getenv); err != nil {
		return err
	}
	if o.events, err = eventsMode(o.cfg.Getenv); err != nil {
		return err
	}
	if o.share, err = sharedStreamMode(o.cfg.Getenv); err != nil {
		return err
	}
	o.lo, err = setupLocal(o.cfg)
	return err
}

// newEngine makes the device engine, with no stream or communicator yet.
func (o *opening) newEngine() {
	o.eng = &device{
		lib: o.lo.lib, hooks: o.lo.hooks, dev: o.lo.dev,
		rank:     o.rank,
		size:     o.size,
		blocking: o.blocking,
		timed:    o.trace.on,
		skip:     o.ipc,
		comms:    make([]uintptr, 2*o.size+1),
		streams:  make([]*cuda.Stream, 2*o.size+1),
	}
}

// makeChannels makes what the channels run on (none with one rank): the
// streams (makeStreams) and the connection buffers, then the host
// connection and the NCCL communicators (init.go), while the completion
// words are set up beside them (startFlags).
func (o *opening) makeChannels(ctx context.Context) error {
	if o.size == 1 {
		return nil
	}
	if err := o.makeStreams(); err != nil {
		return err
	}
	var err error
	if o.eng.warm, err = cuda.Alloc[byte](o.lo.dev, int64(2*o.size)); err != nil {
		return fmt.Errorf("nccl: allocating the connection buffers: %w", err)
	}
	// Joined on the way out, failed or not: before fail, or anything
	// else, touches the engine's memory.
	defer o.startFlags()()
	if o.ctl == nil { // a derived communicator's is given
		if o.ctl, err = openControl(ctx, o.cfg, o.ipc != nil); err != nil {
			return err
		}
		o.trace.phase("the host connection open")
	}
	if err = initComms(ctx, o.eng, o.rank, o.size, o.hellos); err != nil {
		return err
	}
	o.trace.phase("the NCCL communicators made")
	if o.ipc != nil {
		if o.ipcMem, err = newCudaIPC(o.lo.dev, o.ipc, o.events); err != nil {
			return err
		}
	}
	return nil
}

// makeStreams makes a CUDA stream for each channel, one for the
// communicator of every rank, and, unless SharedStreamEnv=0, one per
// other rank that the two channels of the pair share.
func (o *opening) makeStreams() error {
	eng, dev := o.eng, o.lo.dev
	var err error
	for p := range o.size {
		if p == o.rank {
			continue
		}
		for _, ch := range []int{sendChan(p), recvChan(p)} {
			if eng.streams[ch], err = cuda.NewStream(dev); err != nil {
				return fmt.Errorf("nccl: creating a stream on %v: %w", dev, err)
			}
		}
	}
	if o.world {
		if eng.streams[worldChan(o.size)], err = cuda.NewStream(dev); err != nil {
			return fmt.Errorf("nccl: creating a stream on %v: %w", dev, err)
		}
	}
	if o.share {
		// Given to the engine first, so that fail's close destroys
		// those made if one fails.
		eng.setShared(make([]*cuda.Stream, o.size))
		for p := range o.size {
			if p == o.rank {
				continue
			}
			if eng.shared[p], err = cuda.NewStream(dev); err != nil {
				return fmt.Errorf("nccl: creating a stream on %v: %w", dev, err)
			}
		}
	}
	return nil
}

// startFlags sets up the completion words (device.useFlags) on a
// goroutine of its own, while the ranks meet and NCCL creates the
// communicators (page-locked memory takes a while to allocate), unless
// EventsEnv=1. It returns the wait for that, to be called once, before
// anything else touches the engine's memory.
func (o *opening) startFlags() (join func()) {
	eng := o.eng
	flagsDone := make(chan error, 1)
	if o.events {
		flagsDone <- errors.New(EventsEnv + "=1")
	} else {
		next := sendChan((o.rank + 1) % o.size)
		go func() { flagsDone <- eng.useFlags(len(eng.comms), eng.streams[next]) }()
	}
	return func() {
		if ferr := <-flagsDone; ferr != nil {
			o.trace.phase("completion by events: " + ferr.Error())
		} else {
			o.trace.phase("completion by words in page-locked memory")
		}
	}
}

// fail undoes what Open made before err: the other ranks are told first
// (an abort may wait for its peer's), then the engine's communicators are
// aborted and its memory freed (device.close).
func (o *opening) fail(err error) error {
	if o.ctl != nil {
		o.ctl.abort(err)
		o.ctl.close()
	}
	if aerr := o.eng.close(); aerr != nil {
		err = joinAbort(err, aerr)
	}
	if o.ipcMem != nil {
		o.ipcMem.close()
	}
	return err
}

// makeConn makes the communicator around the engine and the host
// connection, and starts its goroutines.
func (o *opening) makeConn() *conn {
	var tr *traceStats
	if o.trace.on {
		tr = &traceStats{}
	}
	var ipc *ipcPath
	if o.ipcMem != nil {
		ipc = newIPCPath(o.ipcMem, o.ipc)
	}
	return newConn(connOptions{
		rank: o.rank, size: o.size, dev: int(o.lo.dev), check: o.cfg.Check,
		eng: o.eng, ctl: o.ctl, trace: tr, world: o.world, derive: o.deriver(), fam: o.fam, ipc: ipc,
	})
}

// connect makes first contact on every channel: in one NCCL group over
// all of them with blocking communicators (device.connectBlocking), as
// operations of c with non-blocking ones (conn.connectAll).
func (o *opening) connect(ctx context.Context, c *conn) error {
	if o.eng.blocking {
		return o.eng.connectBlocking(ctx, o.rank, o.size)
	}
	base := o.eng.warm.Ptr()
	return c.connectAll(ctx, func(p int) (send, recv op) {
		send = op{peer: p, typ: backend.Uint8, count: 1, addr: base}
		recv = op{peer: p, recv: true, typ: backend.Uint8, count: 1, addr: base + uintptr(1+p)}
		return send, recv
	})
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
	ipc   bool // IPCEnv is on
	world bool // CollectivesEnv is on (rank 0's counts): NCCL runs the collectives
}

// idPlaces says, by rank, where makeIDs makes an ID.
func idPlaces(rank int, hellos []hello, world bool) []bool {
	at := make([]bool, len(hellos))
	for p := range at {
		at[p] = p != rank && !sameGPU(hellos[p], hellos[rank]) || p == rank && rank == 0 && world
	}
	return at
}

// makeIDs makes the NCCL unique IDs this rank gives out (hello.go): one
// per rank it meets through NCCL, and at rank 0 (its own place) the ID of
// the communicator of every rank when world says there is one.
func (lo *local) makeIDs(rank int, hellos []hello, world bool) ([][idBytes]byte, error) {
	ids := make([][idBytes]byte, len(hellos))
	for p, yes := range idPlaces(rank, hellos, world) {
		if yes {
			var err error
			if ids[p], err = lo.lib.uniqueID(); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
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
	lo := &local{lib: lib, dev: dev}
	if lo.world, err = collectivesMode(cfg.Getenv); err != nil {
		return nil, err
	}
	if lo.ipc, err = ipcMode(cfg.Getenv); err != nil {
		return nil, err
	}
	lo.host, _ = os.Hostname()
	lo.bus, _ = dev.PCIBusID()
	if lo.hooks, err = newDevHooks(dev); err != nil {
		return nil, fmt.Errorf("nccl: preparing %v: %w", dev, err)
	}
	return lo, nil
}
