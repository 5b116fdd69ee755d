//go:build linux

package shm

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"net"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// A pair's segment, as a transport between two processes might lay it out:
// a page of control words (each process's bell, a stop flag, counters),
// then the ring from the parent to the child and the one back.
const (
	ctlBytes    = 4096
	offBellP    = 0   // the parent sleeps on it
	offBellC    = 128 // the child sleeps on it
	offStop     = 256 // set by the parent: the helper stops
	offCountP   = 384 // the bell ping-pong's counters
	offCountC   = 512
	offRangP    = 640 // the round each side's ring has returned for
	offRangC    = 768
	bellTimeout = 2 * time.Second
)

func pairLayout(capacity int) (size, toChild, toParent int) {
	toChild = ctlBytes
	toParent = toChild + RingBytes(capacity)
	return toParent + RingBytes(capacity), toChild, toParent
}

// pair is one process's view of the shared segment.
type pair struct {
	seg      *Segment
	out, in  *Ring
	me, peer Bell
	stop     *atomic.Uint32
	mem      []byte
}

func (p *pair) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&p.mem[off])) }

// counter is the word at off as an atomic counter.
func (p *pair) counter(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&p.mem[off])) }

// startPair creates a segment with two rings of capacity bytes, starts a
// helper in role (with args), passes it the segment and waits until it
// has mapped it; then the parent drops the descriptor, as a transport
// would.
func startPair(t testing.TB, role string, capacity int, args ...string) (*pair, *child) {
	size, toChild, toParent := pairLayout(capacity)
	seg, err := Create("courier-test-"+role, size, FillAhead)
	require.NoError(t, err)
	t.Cleanup(func() { seg.Close() })
	mem := seg.Bytes()
	out, err := NewRing(mem[toChild:], capacity)
	require.NoError(t, err)
	in, err := NewRing(mem[toParent:], capacity)
	require.NoError(t, err)
	p := &pair{seg: seg, out: out, in: in, mem: mem}
	p.me, p.peer = NewBell(p.word(offBellP)), NewBell(p.word(offBellC))
	p.stop = (*atomic.Uint32)(unsafe.Pointer(p.word(offStop)))

	c := startChild(t, role, args...)
	require.NoError(t, SendFds(c.conn, []byte(fmt.Sprintf("%d\n", capacity)), seg.Fd()))
	require.Equal(t, "mapped", c.line(t))
	require.NoError(t, seg.CloseFd())
	return p, c
}

// childPair is the helper's side of startPair: it receives the segment,
// maps it, drops the descriptor and attaches the rings.
func childPair(conn *net.UnixConn) (*pair, *bufio.Scanner, error) {
	var msg [64]byte
	n, fds, err := RecvFds(conn, msg[:], 1)
	if err != nil {
		return nil, nil, err
	}
	if len(fds) != 1 {
		return nil, nil, fmt.Errorf("got %d descriptors", len(fds))
	}
	var capacity int
	if _, err := fmt.Sscanf(string(msg[:n]), "%d", &capacity); err != nil {
		return nil, nil, fmt.Errorf("message %q: %v", msg[:n], err)
	}
	seg, err := Map(fds[0], FillAhead)
	if err != nil {
		return nil, nil, err
	}
	if err := seg.CloseFd(); err != nil {
		return nil, nil, err
	}
	mem := seg.Bytes()
	_, toChild, toParent := pairLayout(capacity)
	if len(mem) != toParent+RingBytes(capacity) {
		return nil, nil, fmt.Errorf("segment of %d bytes", len(mem))
	}
	in, err := AttachRing(mem[toChild:])
	if err != nil {
		return nil, nil, err
	}
	out, err := AttachRing(mem[toParent:])
	if err != nil {
		return nil, nil, err
	}
	p := &pair{seg: seg, out: out, in: in, mem: mem}
	p.me, p.peer = NewBell(p.word(offBellC)), NewBell(p.word(offBellP))
	p.stop = (*atomic.Uint32)(unsafe.Pointer(p.word(offStop)))
	if _, err := fmt.Fprintln(conn, "mapped"); err != nil {
		return nil, nil, err
	}
	return p, bufio.NewScanner(conn), nil
}

// exchangeStats is what one side of exchange saw.
type exchangeStats struct {
	sentCRC, recvCRC uint32
	sleeps, timeouts int
	wraps            uint64
}

func (s exchangeStats) String() string {
	return fmt.Sprintf("%08x %08x %d %d %d", s.sentCRC, s.recvCRC, s.sleeps, s.timeouts, s.wraps)
}

func parseStats(line string) (s exchangeStats, err error) {
	_, err = fmt.Sscanf(line, "%x %x %d %d %d", &s.sentCRC, &s.recvCRC, &s.sleeps, &s.timeouts, &s.wraps)
	return s, err
}

// exchange sends records records to the peer (the stream of sendSeed) and
// receives as many (the stream of recvSeed), checking each, on one
// goroutine, as a transport's progress loop would: produce what fits,
// consume what came, and when neither moves, sleep on this process's bell
// by its protocol (WantSpace for room, Arm, re-check, Sleep). A sleep
// that lasts its whole timeout is counted: with no lost wake-up there is
// none.
func exchange(p *pair, records int, sendSeed, recvSeed uint64) (exchangeStats, error) {
	var st exchangeStats
	out := newRecordStream(sendSeed, p.out.MaxRecord())
	in := newRecordStream(recvSeed, p.in.MaxRecord())
	pending := out.next()
	sent, recvd := 0, 0
	for sent < records || recvd < records {
		progress := false
		for sent < records {
			rec := p.out.Reserve(len(pending))
			if rec == nil {
				break
			}
			copy(rec, pending)
			p.out.Commit()
			p.peer.Ring()
			st.sentCRC = crc32.Update(st.sentCRC, crc32.IEEETable, pending)
			sent++
			progress = true
			pending = out.next()
		}
		for recvd < records {
			rec, err := p.in.Next()
			if err != nil {
				return st, err
			}
			if rec == nil {
				break
			}
			if want := in.next(); !bytes.Equal(rec, want) {
				return st, fmt.Errorf("record %d: %d bytes, want %d bytes, or different ones", recvd, len(rec), len(want))
			}
			st.recvCRC = crc32.Update(st.recvCRC, crc32.IEEETable, rec)
			p.in.Consume()
			if p.in.TakeSpaceWanted() {
				p.peer.Ring()
			}
			recvd++
			progress = true
		}
		if progress {
			continue
		}
		// Arm first, then ask for room, then look again: a consumer that
		// takes the ask rings a bell that is armed already, and one that
		// made room before the ask is seen by the look.
		v := p.me.Arm()
		if sent < records {
			p.out.WantSpace()
		}
		if !p.in.Empty() || sent < records && p.out.Reserve(len(pending)) != nil {
			p.me.Disarm()
			continue
		}
		start := time.Now()
		if err := p.me.Sleep(v, bellTimeout); err != nil {
			return st, err
		}
		st.sleeps++
		if time.Since(start) >= bellTimeout {
			st.timeouts++
		}
	}
	st.wraps = p.in.head / p.in.cap
	return st, nil
}

func init() {
	roles["exchange"] = func(conn *net.UnixConn, args []string) error {
		p, _, err := childPair(conn)
		if err != nil {
			return err
		}
		st, err := exchange(p, atoi(args[0]), 2, 1)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(conn, st)
		return err
	}
}

// TestProcessExchange runs rings both ways between two processes: millions
// of records of random sizes (0 B to the largest a 64 KiB ring takes),
// every one checked, the streams' checksums compared, the rings wrapping
// thousands of times, and each side sleeping on its bell whenever it
// cannot move, with no sleep running into its timeout.
func TestProcessExchange(t *testing.T) {
	records := 2_000_000
	if testing.Short() || raceEnabled {
		records = 300_000
	}
	p, c := startPair(t, "exchange", 1<<16, fmt.Sprint(records))
	start := time.Now()
	mine, err := exchange(p, records, 1, 2)
	require.NoError(t, err)
	theirs, err := parseStats(c.line(t))
	require.NoError(t, err)
	c.wait(t)
	t.Logf("%d records each way in %v; parent %+v; child %+v", records, time.Since(start), mine, theirs)
	require.Equal(t, mine.sentCRC, theirs.recvCRC)
	require.Equal(t, theirs.sentCRC, mine.recvCRC)
	require.Zero(t, mine.timeouts, "sleeps that ran into their timeout (a lost wake-up)")
	require.Zero(t, theirs.timeouts, "sleeps that ran into their timeout (a lost wake-up)")
	require.Greater(t, mine.wraps, uint64(100))
	require.Greater(t, theirs.wraps, uint64(100))
}
