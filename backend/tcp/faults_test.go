package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/auth"
	"github.com/courier-mp/courier/internal/engine"
	"github.com/courier-mp/courier/internal/faultproxy"
)

// The exchange that the fault tests run between rank 1, whose data
// connection to rank 0 goes through a fault proxy, and rank 0. Frames up
// (rank 1 to rank 0): EAGER (tag 5), RTS (tag 6), DATA of tag 6; down:
// CTS (tag 6), EAGER (tag 7, rank 0's reply once it has both).
const (
	smallLen = 1000    // tag 5, eager
	largeLen = 1 << 20 // tag 6, rendezvous
	replyLen = 100     // tag 7, eager
)

// proxied opens a job of two ranks whose rank 1 dials rank 0 through a
// fault proxy with faults, and returns the communicators and the proxy.
func proxied(t *testing.T, faults ...faultproxy.Fault) ([]backend.Conn, *faultproxy.Proxy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var px *faultproxy.Proxy
	h := newHub(2, func(blobs [][]byte) {
		cd, err := parseCard(blobs[0])
		if !assert.NoError(t, err) {
			return
		}
		px, err = faultproxy.Listen(cd.tcp, faultproxy.Options{
			// The handshake: the claim up; the hello and the answer down.
			Skip:   [2]int64{claimSize, helloSize + 1 + 4 + auth.MACSize},
			Faults: faults,
		})
		if !assert.NoError(t, err) {
			return
		}
		cd.tcp = px.Addr()
		blobs[0] = cd.encode()
	})
	conns, errs := openAll(ctx, 2, "fault-key", h)
	if px != nil {
		t.Cleanup(func() { px.Close() })
	}
	t.Cleanup(func() { closeConns(conns) })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.NotNil(t, px)
	return conns, px
}

// outcome is what each operation of the exchange ended with.
type outcome struct {
	name string
	err  error
	got  []byte // a receive's buffer (nil for sends)
	want []byte
}

// exchange runs the exchange; each wait is bounded by bound.
func exchange(t *testing.T, cs []backend.Conn, bound time.Duration) []*outcome {
	t.Helper()
	pattern := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	small, large, reply := pattern(smallLen, 1), pattern(largeLen, 2), pattern(replyLen, 3)
	oSmall := &outcome{name: "rank 0 Recv tag 5", got: make([]byte, smallLen), want: small}
	oLarge := &outcome{name: "rank 0 Recv tag 6", got: make([]byte, largeLen), want: large}
	oReply := &outcome{name: "rank 1 Recv tag 7", got: make([]byte, replyLen), want: reply}
	oSend5 := &outcome{name: "rank 1 Send tag 5"}
	oSend6 := &outcome{name: "rank 1 Send tag 6"}
	oSend7 := &outcome{name: "rank 0 Send tag 7"}
	waitOn := func(o *outcome, r backend.Request, err error) {
		if err == nil {
			_, err = r.Wait(bound)
			r.Release()
		}
		o.err = err
	}
	u8 := func(b []byte) backend.Buffer { return bufOf(b, backend.Uint8) }
	var wg sync.WaitGroup
	wg.Go(func() { // rank 0
		r5, e5 := cs[0].Irecv(u8(oSmall.got), 1, 5, 0)
		r6, e6 := cs[0].Irecv(u8(oLarge.got), 1, 6, 0)
		waitOn(oSmall, r5, e5)
		waitOn(oLarge, r6, e6)
		s7, e7 := cs[0].Isend(u8(reply), 1, 7, 0)
		waitOn(oSend7, s7, e7)
	})
	wg.Go(func() { // rank 1
		r7, e7 := cs[1].Irecv(u8(oReply.got), 0, 7, 0)
		s5, e5 := cs[1].Isend(u8(small), 0, 5, 0)
		s6, e6 := cs[1].Isend(u8(large), 0, 6, 0)
		waitOn(oSend5, s5, e5)
		waitOn(oSend6, s6, e6)
		waitOn(oReply, r7, e7)
	})
	wg.Wait()
	return []*outcome{oSmall, oLarge, oReply, oSend5, oSend6, oSend7}
}

// assertNamedOrRight checks that every operation either completed with the
// right data or failed with ErrPeerLost; it returns how many failed.
func assertNamedOrRight(t *testing.T, outs []*outcome) int {
	t.Helper()
	failed := 0
	for _, o := range outs {
		if o.err != nil {
			failed++
			assert.ErrorIs(t, o.err, backend.ErrPeerLost, "%s", o.name)
			continue
		}
		if o.want != nil && !bytes.Equal(o.got, o.want) {
			t.Errorf("%s completed with wrong data: %s", o.name, diff(o.got, o.want))
		}
	}
	return failed
}

// diff describes where got and want differ.
func diff(got, want []byte) string {
	var at []int
	for i := range got {
		if got[i] != want[i] {
			at = append(at, i)
		}
	}
	return fmt.Sprintf("%d bytes differ, first at %v", len(at), at[:min(len(at), 4)])
}

// TestFlippedHeaderIsNamed flips one byte of each header field of each
// kind of frame the exchange carries, on its way: the rank that reads the
// frame ends the link with ErrCorrupt, every operation that had not
// completed ends with ErrPeerLost (within the waits' bound, never a hang),
// and no receive completes with wrong data. Before the header had its
// check word, a flipped type, tag or count was a silent hang and a flipped
// CTS flag a false ErrTruncate.
func TestFlippedHeaderIsNamed(t *testing.T) {
	type frame struct {
		dir  faultproxy.Dir
		kind uint8
		name string
		hit  string // the operation whose frame is flipped: it fails with ErrCorrupt
	}
	frames := []frame{
		{faultproxy.Up, engine.KindEager, "EAGER", "rank 0 Recv tag 5"},
		{faultproxy.Up, engine.KindRTS, "RTS", "rank 0 Recv tag 6"},
		{faultproxy.Down, engine.KindCTS, "CTS", "rank 1 Send tag 6"},
		{faultproxy.Up, engine.KindData, "DATA", "rank 0 Recv tag 6"},
		{faultproxy.Down, engine.KindEager, "reply EAGER", "rank 1 Recv tag 7"},
	}
	fields := []string{"kind", "type", "flags", "tag", "count", "seq", "sid", "comm", "check"}
	const bound = 5 * time.Second
	for _, fr := range frames {
		for _, field := range fields {
			for _, mask := range []byte{0x01, 0x80} {
				t.Run(fmt.Sprintf("%s/%s/%#02x", fr.name, field, mask), func(t *testing.T) {
					cs, px := proxied(t, faultproxy.Fault{
						Dir: fr.dir, Match: faultproxy.Kind(fr.kind, 0),
						Action: faultproxy.Flip, Offset: faultproxy.HeaderField[field], Mask: mask,
					})
					start := time.Now()
					outs := exchange(t, cs, bound)
					require.Equal(t, 1, px.Fired(0), "the frame was not flipped")
					assert.Positive(t, assertNamedOrRight(t, outs), "nothing failed")
					for _, o := range outs {
						if o.name == fr.hit {
							assert.ErrorIs(t, o.err, backend.ErrCorrupt, "%s", o.name)
						}
					}
					assert.Less(t, time.Since(start), bound, "the operations ended only by their bound")
				})
			}
		}
	}
}

// TestFlippedPayloadDelivered flips a payload byte of an eager message
// and of a rendezvous's DATA. Payloads carry no check of courier's own
// (PROTOCOL.md, "Threat model": TCP's checksum covers accidents on the
// wire; an on-path party that alters bytes is what sealing frames would
// stop), so the receive gets the altered byte, and only that: the framing
// holds and every other message arrives right.
func TestFlippedPayloadDelivered(t *testing.T) {
	for _, c := range []struct {
		name   string
		kind   uint8
		offset int // within the frame
		hit    string
		at     int // the byte of the message that changes
	}{
		{"EAGER", engine.KindEager, engine.HeaderSize + 10, "rank 0 Recv tag 5", 10},
		{"DATA", engine.KindData, engine.HeaderSize + 100, "rank 0 Recv tag 6", 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs, px := proxied(t, faultproxy.Fault{
				Dir: faultproxy.Up, Match: faultproxy.Kind(c.kind, 0),
				Action: faultproxy.Flip, Offset: c.offset, Mask: 0x10,
			})
			outs := exchange(t, cs, 5*time.Second)
			require.Equal(t, 1, px.Fired(0))
			for _, o := range outs {
				require.NoError(t, o.err, "%s", o.name)
				if o.name == c.hit {
					want := bytes.Clone(o.want)
					want[c.at] ^= 0x10
					assert.Equal(t, want, o.got, "%s: not exactly the flipped byte", o.name)
				} else if o.want != nil {
					assert.Equal(t, o.want, o.got, "%s", o.name)
				}
			}
		})
	}
}

// TestSlowLinkCompletes delays every frame both ways, and stalls each
// direction for a while, for less than any bound: everything completes
// with the right data.
func TestSlowLinkCompletes(t *testing.T) {
	t.Parallel() // waits more than it computes
	for _, c := range []struct {
		name   string
		faults []faultproxy.Fault
	}{
		{"delay", []faultproxy.Fault{
			{Dir: faultproxy.Up, Action: faultproxy.Delay, D: 20 * time.Millisecond},
			{Dir: faultproxy.Down, Action: faultproxy.Delay, D: 20 * time.Millisecond},
		}},
		{"stall up", []faultproxy.Fault{{Dir: faultproxy.Up, Match: faultproxy.Kind(engine.KindRTS, 0), Action: faultproxy.Stall, D: 700 * time.Millisecond}}},
		{"stall down", []faultproxy.Fault{{Dir: faultproxy.Down, Match: faultproxy.Kind(engine.KindCTS, 0), Action: faultproxy.Stall, D: 700 * time.Millisecond}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs, px := proxied(t, c.faults...)
			outs := exchange(t, cs, 5*time.Second)
			assert.Zero(t, assertNamedOrRight(t, outs), "operations failed")
			for k := range c.faults {
				assert.Positive(t, px.Fired(k), "fault %d never acted", k)
			}
		})
	}
}

// TestCutLinkEndsBothSides closes the relayed connection at a frame or
// part way into one: every operation that had not completed ends with
// ErrPeerLost at once, on both ranks.
func TestCutLinkEndsBothSides(t *testing.T) {
	const recv6, send6, recv7 = "rank 0 Recv tag 6", "rank 1 Send tag 6", "rank 1 Recv tag 7"
	for _, c := range []struct {
		name string
		f    faultproxy.Fault
		lost []string // the operations that must fail
	}{
		{"before RTS", faultproxy.Fault{Dir: faultproxy.Up, Match: faultproxy.Kind(engine.KindRTS, 0), Action: faultproxy.Cut}, []string{recv6, send6, recv7}},
		{"inside RTS header", faultproxy.Fault{Dir: faultproxy.Up, Match: faultproxy.Kind(engine.KindRTS, 0), Action: faultproxy.Cut, Offset: 17}, []string{recv6, send6, recv7}},
		// The sender wrote all of its DATA (into the socket): its send is
		// complete, as a send is once its buffer may be reused.
		{"inside DATA payload", faultproxy.Fault{Dir: faultproxy.Up, Match: faultproxy.Kind(engine.KindData, 0), Action: faultproxy.Cut, Offset: engine.HeaderSize + 4096}, []string{recv6, recv7}},
		{"before CTS", faultproxy.Fault{Dir: faultproxy.Down, Match: faultproxy.Kind(engine.KindCTS, 0), Action: faultproxy.Cut}, []string{recv6, send6, recv7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs, px := proxied(t, c.f)
			start := time.Now()
			outs := exchange(t, cs, 5*time.Second)
			require.Equal(t, 1, px.Fired(0))
			assert.Positive(t, assertNamedOrRight(t, outs))
			for _, o := range outs {
				if slices.Contains(c.lost, o.name) {
					assert.ErrorIs(t, o.err, backend.ErrPeerLost, "%s", o.name)
				}
			}
			assert.Less(t, time.Since(start), time.Second, "a cut link was noticed late")
		})
	}
}

// TestBlackholedLinkEndsAtTheBound makes the relay swallow everything rank
// 1 sends from its RTS on, while the TCP connections stay up (the proxy
// acknowledges what it swallows, so neither kernel sees a loss): the
// waits on what never comes (the large message) end at their bound with
// ErrTimeout, what goes the other way still arrives, nothing is delivered
// wrong, and the communicators still close. A peer that stops talking
// while its connection lives is bounded by the waits' timeout
// (COURIER_TIMEOUT), not by a loss.
func TestBlackholedLinkEndsAtTheBound(t *testing.T) {
	cs, px := proxied(t, faultproxy.Fault{Dir: faultproxy.Up, Match: faultproxy.Kind(engine.KindRTS, 0), Action: faultproxy.Blackhole})
	const bound = 300 * time.Millisecond
	start := time.Now()
	outs := exchange(t, cs, bound)
	require.Equal(t, 1, px.Fired(0))
	for _, o := range outs {
		switch o.name {
		case "rank 0 Recv tag 5", "rank 1 Send tag 5", "rank 1 Recv tag 7", "rank 0 Send tag 7":
			assert.NoError(t, o.err, "%s", o.name)
		case "rank 0 Recv tag 6", "rank 1 Send tag 6":
			assert.True(t, errors.Is(o.err, backend.ErrTimeout), "%s: %v, want ErrTimeout", o.name, o.err)
		}
		if o.err == nil && o.want != nil {
			assert.Equal(t, o.want, o.got, "%s", o.name)
		}
	}
	assert.Less(t, time.Since(start), 10*bound)
}
