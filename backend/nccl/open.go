package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

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
