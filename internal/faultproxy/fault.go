package faultproxy

import (
	"io"
	"time"

	"github.com/courier-mp/courier/internal/engine"
)

// Dir is a direction of a relayed connection.
type Dir int

const (
	// Up is from the rank that dialed to the proxy's target.
	Up Dir = iota
	// Down is from the target back to the rank that dialed.
	Down
)

// String names the direction.
func (d Dir) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// Action is what a fault does to the frames it matches.
type Action int

const (
	// Delay holds every matching frame for Fault.D before it forwards it.
	Delay Action = iota
	// Stall stops the direction for Fault.D at the first matching frame,
	// then forwards it and goes on.
	Stall
	// Blackhole forwards nothing from the first matching frame on, in its
	// direction; the proxy keeps reading (and acknowledging) what comes.
	Blackhole
	// Cut forwards the first Fault.Offset bytes of the first matching
	// frame and closes both sides of the connection.
	Cut
	// Flip XORs Fault.Mask into the byte at Fault.Offset of the first
	// matching frame (0 … 39 the header, 40 on its payload).
	Flip
)

// Fault is one fault of a proxy.
type Fault struct {
	// Dir is the direction whose frames it sees.
	Dir Dir
	// Match selects the frames it applies to; nil matches every frame.
	Match func(Frame) bool
	// Action is what it does.
	Action Action
	// D is how long Delay holds each frame and Stall stops the direction.
	D time.Duration
	// Offset is the byte of the frame that Flip alters, or how many bytes
	// of the frame Cut lets through.
	Offset int
	// Mask is what Flip XORs in (0 means 0xFF).
	Mask byte
}

// Frame is a frame as the proxy read it, before any fault.
type Frame struct {
	// Index counts the frames of its direction on its connection, from 0.
	Index int
	// Header is the frame's header as its sender wrote it.
	Header [engine.HeaderSize]byte
	// PayloadLen is the number of payload bytes after the header.
	PayloadLen int
}

// Kind is the frame's kind (engine.KindEager, ...).
func (f Frame) Kind() uint8 { return f.Header[0] }

// Nth matches the frame of index i.
func Nth(i int) func(Frame) bool { return func(f Frame) bool { return f.Index == i } }

// Kind matches the n-th frame (from 0) of kind k.
func Kind(k uint8, n int) func(Frame) bool {
	seen := 0
	return func(f Frame) bool {
		if f.Kind() != k {
			return false
		}
		seen++
		return seen == n+1
	}
}

// HeaderField names the offset of each field of the header, as
// PROTOCOL.md lays them out, for tables of flips.
var HeaderField = map[string]int{
	"kind":  0,
	"type":  1,
	"flags": 2,
	"tag":   4,
	"count": 8,
	"seq":   16,
	"sid":   24,
	"comm":  32,
	"check": engine.CheckOffset,
}

// relay copies src to dst, the frames through the faults of its
// direction, until either side ends or the proxy cuts the connection.
func (p *Proxy) relay(c *conn, d Dir, src io.Reader, dst io.Writer) {
	if n := p.opts.Skip[d]; n > 0 {
		if _, err := io.CopyN(dst, src, n); err != nil {
			return
		}
	}
	var buf []byte
	for i := 0; ; i++ {
		f := Frame{Index: i}
		if _, err := io.ReadFull(src, f.Header[:]); err != nil {
			return
		}
		n := payloadLen(f.Header[:])
		if n < 0 {
			// A header the proxy cannot size (the sender's own bug, or a
			// stream that was altered before it): the rest goes through
			// as it comes.
			if _, err := dst.Write(f.Header[:]); err == nil {
				io.Copy(dst, src)
			}
			return
		}
		f.PayloadLen = n
		if cap(buf) < engine.HeaderSize+n {
			buf = make([]byte, engine.HeaderSize+n)
		}
		buf = buf[:engine.HeaderSize+n]
		copy(buf, f.Header[:])
		if _, err := io.ReadFull(src, buf[engine.HeaderSize:]); err != nil {
			return
		}
		out := buf
		for k, ft := range p.opts.Faults {
			if ft.Dir != d || !p.take(c, k, ft, f) {
				continue
			}
			switch ft.Action {
			case Delay, Stall:
				select {
				case <-time.After(ft.D):
				case <-c.done:
					return
				}
			case Blackhole:
				io.Copy(io.Discard, src)
				return
			case Cut:
				dst.Write(out[:min(max(ft.Offset, 0), len(out))])
				c.close()
				return
			case Flip:
				if ft.Offset >= 0 && ft.Offset < len(out) {
					m := ft.Mask
					if m == 0 {
						m = 0xFF
					}
					out[ft.Offset] ^= m
				}
			}
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
	}
}

// take reports whether fault k applies to f on connection c: Delay to
// every frame it matches, the others to the first one only. It counts
// what it applies.
func (p *Proxy) take(c *conn, k int, ft Fault, f Frame) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ft.Action != Delay && c.spent[k] {
		return false
	}
	if ft.Match != nil && !ft.Match(f) {
		return false
	}
	c.spent[k] = true
	p.fired[k]++
	return true
}

// payloadLen is the payload size that header h announces, or -1 when it
// cannot be read as a frame of courier's TCP links.
func payloadLen(h []byte) int {
	hd, err := engine.DecodeHeader(h, engine.EagerLimit)
	if err != nil {
		return -1
	}
	n := hd.PayloadLen()
	if n < 0 || n > engine.MaxChunk {
		return -1
	}
	return int(n)
}
