package tcp

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Accepting the higher ranks of a pair on a data port. Anyone who can
// reach the port can connect (PROTOCOL.md, "Who can connect"): a port
// scan, a process of another job, garbage, a replayed handshake. None of
// them may fail the job or hold it up, so the acceptor takes connections
// until each expected rank has one that passed the handshake, runs the
// handshakes side by side, each within hsTimeout, drops (closes) those
// that fail, and bounds how many run at once.

// hsTimeout bounds the handshake of one accepted connection: a peer that
// has not proved itself by then is dropped. A variable for tests.
var hsTimeout = 5 * time.Second

// maxUnauthenticated bounds the handshakes an acceptor runs at once; a
// connection beyond them is closed as soon as it is accepted. A rank of
// the job is never refused for it: its dial is retried (dialPeer).
const maxUnauthenticated = 64

// acceptRanks accepts connections on ln until every rank of want has
// connected and passed the handshake, and returns their connections by
// rank. fits reports why a rank that proved it holds the key may not
// connect here ("" if it may: the transport its card names). A rank that
// is already connected is refused; the first connection stays. On
// failure (ctx ends, ln fails) it closes what it accepted and returns an
// error naming the ranks still missing and the connections it dropped. It
// closes ln, and returns once every goroutine it started has ended.
func acceptRanks(ctx context.Context, ln net.Listener, hs handshake, want []int, fits func(rank int) string) (map[int]net.Conn, error) {
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	defer cancel()

	type result struct {
		rank int
		nc   net.Conn
		err  error
	}
	results := make(chan result)
	acceptErr := make(chan error, 1)
	var (
		mu       sync.Mutex
		admitted = make(map[int]bool) // ranks whose handshake has claimed them
	)
	admit := func(j int) string {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !slices.Contains(want, j):
			return fmt.Sprintf("rank %d is not expected on this port", j)
		case admitted[j]:
			return fmt.Sprintf("rank %d is already connected", j)
		}
		if why := fits(j); why != "" {
			return why
		}
		admitted[j] = true
		return ""
	}
	release := func(j int) {
		mu.Lock()
		defer mu.Unlock()
		delete(admitted, j)
	}
	slots := make(chan struct{}, maxUnauthenticated)
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() && actx.Err() == nil {
					time.Sleep(10 * time.Millisecond) // out of descriptors: strangers hold them for hsTimeout at most
					continue
				}
				acceptErr <- err
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				nc.Close()
				continue
			}
			wg.Go(func() {
				j, sess, err := hs.accept(actx, nc, admit, release)
				<-slots
				if err == nil {
					if nc, err = hs.sealConn(nc, sess, false); err != nil {
						release(j)
					}
				} else {
					nc.Close()
				}
				select {
				case results <- result{j, nc, err}:
				case <-actx.Done():
					if err == nil {
						nc.Close()
					}
				}
			})
		}
	})

	got := make(map[int]net.Conn, len(want))
	var dropped int
	var lastDrop error
	fail := func(why error) (map[int]net.Conn, error) {
		for _, nc := range got {
			nc.Close()
		}
		var missing []int
		for _, j := range want {
			if got[j] == nil {
				missing = append(missing, j)
			}
		}
		err := fmt.Errorf("tcp: rank %d: waiting for %s to connect: %w", hs.rank, rankList(missing), why)
		if dropped > 0 {
			err = fmt.Errorf("%w (dropped %d %s that failed the handshake; the last: %v)", err, dropped, connections(dropped), lastDrop)
		}
		return nil, err
	}
	for len(got) < len(want) {
		select {
		case r := <-results:
			if r.err != nil {
				dropped++
				lastDrop = r.err
				continue
			}
			got[r.rank] = r.nc
		case err := <-acceptErr:
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return fail(err)
		case <-ctx.Done():
			return fail(context.Cause(ctx))
		}
	}
	return got, nil
}

// rankList says "rank 3" or "ranks 2, 3".
func rankList(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	s := "ranks "
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(r)
	}
	return s
}

// connections is "connection" or "connections", for n of them.
func connections(n int) string {
	if n == 1 {
		return "connection"
	}
	return "connections"
}
