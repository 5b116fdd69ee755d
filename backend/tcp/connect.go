package tcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/shm"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// Transports a job may use between a pair of ranks, as COURIER_TRANSPORTS
// names them.
const (
	TransportSHM = "shm" // shared memory, between ranks of one host
	TransportTCP = "tcp" // TCP, between any two ranks
)

// transportSet is what Open may use, how shared memory copies large
// messages (COURIER_SHM_COPY) and payloads into its rings
// (COURIER_SHM_COPYIN), and how long TCP data may go unanswered.
type transportSet struct {
	shm, tcp bool
	copy     shm.Copy
	copyIn   shm.CopyIn
	fill     shmem.Fill // from shm.PrefaultEnv
	noSplit  bool       // from shm.SplitEnv
	// userTimeout bounds a TCP link's unanswered data (tuneConn; -1: no
	// bound), from COURIER_TCP_USER_TIMEOUT.
	userTimeout time.Duration
}

// transports reads COURIER_TRANSPORTS: a comma-separated list of shm and
// tcp (default: both for the host driver, tcp alone for the tcp driver).
// Without tcp, every rank must be on one host.
func (d Driver) transports(cfg backend.Config) (transportSet, error) {
	if !d.Host {
		return transportSet{tcp: true}, nil
	}
	c, err := shm.ParseCopy(cfg.Getenv(shm.CopyEnv))
	if err != nil {
		return transportSet{}, err
	}
	fill, err := shm.ParseFill(cfg.Getenv(shm.PrefaultEnv))
	if err != nil {
		return transportSet{}, err
	}
	in, err := shm.ParseCopyIn(cfg.Getenv(shm.CopyInEnv))
	if err != nil {
		return transportSet{}, err
	}
	split, err := shm.ParseSplit(cfg.Getenv(shm.SplitEnv))
	if err != nil {
		return transportSet{}, err
	}
	t := transportSet{copy: c, copyIn: in, fill: fill, noSplit: !split}
	v := strings.TrimSpace(cfg.Getenv("COURIER_TRANSPORTS"))
	if v == "" {
		t.shm, t.tcp = true, true
		return t, nil
	}
	for _, name := range strings.Split(v, ",") {
		switch strings.TrimSpace(name) {
		case TransportSHM:
			t.shm = true
		case TransportTCP:
			t.tcp = true
		case "":
		default:
			return t, fmt.Errorf("%w: COURIER_TRANSPORTS=%q: unknown transport %q (have %s, %s)", backend.ErrInvalid, v, name, TransportSHM, TransportTCP)
		}
	}
	if !t.shm && !t.tcp {
		return t, fmt.Errorf("%w: COURIER_TRANSPORTS=%q names no transport", backend.ErrInvalid, v)
	}
	return t, nil
}

// card is what each rank publishes through the bootstrap's all-gather:
// its TCP address, and, where it offers shared memory, the identity of its
// host and the abstract unix socket it listens on there.
type card struct {
	tcp, host, unix string
}

func (c card) encode() []byte {
	return []byte(c.tcp + "\x00" + c.host + "\x00" + c.unix)
}

func parseCard(b []byte) (card, error) {
	f := bytes.Split(b, []byte{0})
	if len(f) != 3 {
		return card{}, fmt.Errorf("tcp: a rank's address card has %d fields, want 3", len(f))
	}
	return card{tcp: string(f[0]), host: string(f[1]), unix: string(f[2])}, nil
}

// sameHost reports whether ranks with cards a and b run on one host (and
// so share its cores), whether or not they may share memory.
func sameHost(a, b card) bool { return a.host != "" && a.host == b.host }

// local reports whether ranks with cards a and b share memory.
func local(a, b card) bool { return sameHost(a, b) && a.unix != "" && b.unix != "" }

// connect publishes this rank's card, connects to every other rank over
// the transport their cards allow (the higher rank of a pair dials), and
// builds the engine over the links.
func connect(ctx context.Context, cfg backend.Config, tr transportSet) (backend.Conn, error) {
	rank, size, key := cfg.Job.Rank, cfg.Job.Size, cfg.Job.Key
	seal, err := parseSeal(cfg.Getenv(SealEnv))
	if err != nil {
		return nil, err
	}
	var mine card
	var tln, uln net.Listener
	if tr.tcp {
		host, err := listenHost(cfg)
		if err != nil {
			return nil, err
		}
		if tln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			return nil, fmt.Errorf("tcp: listen on %s: %w", host, err)
		}
		defer tln.Close()
		mine.tcp = tln.Addr().String()
	}
	// The host's id goes on the card whatever the transports: ranks on
	// one host share its cores, so their waiters must yield (engine
	// Options.LocalRanks) on TCP alone too.
	hostID, hostErr := shmem.HostID()
	mine.host = hostID
	if tr.shm {
		if hostErr == nil {
			var nonce [16]byte
			rand.Read(nonce[:])
			name := "@courier-" + hex.EncodeToString(nonce[:])
			if l, err := net.Listen("unix", name); err == nil {
				uln = l
				defer uln.Close()
				mine.unix = name
			}
		}
		if uln == nil && !tr.tcp {
			return nil, fmt.Errorf("%w: COURIER_TRANSPORTS has no tcp, and shared memory cannot work here", backend.ErrNotSupported)
		}
	}
	for _, ln := range []net.Listener{tln, uln} {
		if ln == nil {
			continue
		}
		if dl, ok := ctx.Deadline(); ok {
			setListenDeadline(ln, dl)
		}
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
	}

	blobs, err := cfg.Exchange.AllGather(ctx, mine.encode())
	if err != nil {
		return nil, fmt.Errorf("tcp: exchanging addresses: %w", err)
	}
	if len(blobs) != size {
		return nil, fmt.Errorf("tcp: exchange returned %d addresses for %d ranks", len(blobs), size)
	}
	cards := make([]card, size)
	for j, b := range blobs {
		if cards[j], err = parseCard(b); err != nil {
			return nil, err
		}
	}
	isLocal := make([]bool, size)
	nlocal := 1 // ranks on this host, this one included
	for j := range cards {
		if j == rank {
			continue
		}
		if sameHost(mine, cards[j]) {
			nlocal++
		}
		if local(mine, cards[j]) {
			isLocal[j] = true
		} else if !tr.tcp || cards[j].tcp == "" {
			return nil, fmt.Errorf("%w: rank %d is on another host (or offers no shared memory) and TCP is not among COURIER_TRANSPORTS", backend.ErrNotSupported, j)
		}
	}

	conns := make([]net.Conn, size)
	hs := handshake{key: key, rank: rank, size: size, seal: seal}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	record := func(j int, nc net.Conn, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		if conns[j] != nil {
			nc.Close()
			errs = append(errs, fmt.Errorf("tcp: rank %d connected twice", j))
			return
		}
		conns[j] = nc
	}
	for j := 0; j < rank; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			network, addr := "tcp", cards[j].tcp
			if isLocal[j] {
				network, addr = "unix", cards[j].unix
			}
			nc, err := dialPeer(ctx, network, addr, hs, j)
			record(j, nc, err)
		}()
	}
	accept := func(ln net.Listener, want []int, wantLocal bool) {
		got, err := acceptRanks(ctx, ln, hs, want, func(j int) string {
			if isLocal[j] != wantLocal {
				return fmt.Sprintf("rank %d connected over the wrong transport", j)
			}
			return ""
		})
		for j, nc := range got {
			record(j, nc, nil)
		}
		if err != nil {
			record(0, nil, err)
		}
	}
	var higherTCP, higherLocal []int
	for j := rank + 1; j < size; j++ {
		if isLocal[j] {
			higherLocal = append(higherLocal, j)
		} else {
			higherTCP = append(higherTCP, j)
		}
	}
	var aw sync.WaitGroup
	if len(higherTCP) > 0 {
		aw.Go(func() { accept(tln, higherTCP, false) })
	}
	if len(higherLocal) > 0 {
		aw.Go(func() { accept(uln, higherLocal, true) })
	}
	aw.Wait()
	wg.Wait()
	closeAll := func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, err
	}

	e, err := engine.New(engine.Options{Rank: rank, Size: size, Check: cfg.Check, LocalRanks: nlocal})
	if err != nil {
		closeAll()
		return nil, err
	}
	var locals []shm.Local
	var links []*link
	for j, nc := range conns {
		if j == rank {
			continue
		}
		if isLocal[j] {
			locals = append(locals, shm.Local{Rank: j, Conn: nc.(*net.UnixConn)})
			continue
		}
		tuneConn(nc, tr.userTimeout)
		l := newLink(e, nc)
		l.p = e.Attach(j, l)
		links = append(links, l)
	}
	if pl := newPoller(links); pl != nil {
		e.AddPoller(pl)
	}
	hub, err := shm.Join(ctx, e, locals, shm.Options{Copy: tr.copy, CopyIn: tr.copyIn, Fill: tr.fill, NoSplit: tr.noSplit})
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, l := range links {
		l.start()
	}
	hub.Start()
	if coll := hub.Coll(); coll != nil {
		return &hostConn{Engine: e, coll: coll}, nil
	}
	return e, nil
}

// setListenDeadline bounds Accept on a TCP or unix listener.
func setListenDeadline(ln net.Listener, dl time.Time) {
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(dl)
	}
}

// Peers says which transport this rank uses to reach each rank: "self",
// "shm" or "tcp". It reports on communicators made by this package's
// drivers; for others it returns nil.
func Peers(c backend.Conn) []string {
	e := engineOf(c)
	if e == nil {
		return nil
	}
	out := make([]string, e.Size())
	for j := range out {
		out[j] = e.Transport(j)
	}
	return slices.Clip(out)
}
