package mp

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"reflect"

	"github.com/courier-mp/courier/backend"
)

// Go values as messages: any value encoding/gob can encode (structs,
// maps, slices, strings, pointers to them, nested), for the messages
// whose shape is not a numeric slice. The receiver needs no size in
// advance: a value travels as two messages from one sender, a header of
// one int64 (the encoding's length in bytes, or −1: the sender could not
// encode it) with the program's tag, so that a receive's wildcards match
// it, then the encoding with a tag of the library's own (negative, which
// no user receive matches) from that sender. The encoding is gob's, with
// gob's rules: exported fields only, pointers followed and flattened, nil
// and empty slices and maps alike, interface values only of types given
// to gob.Register.
//
// Several goroutines may send values at once. A RecvValue takes the
// header and then, from that header's sender, the encoding: receives in
// other goroutines that can match the same sender and tag at the same
// time (a second RecvValue, or a Recv of the header) must not run beside
// it, or they may take each other's part.

// valueTag is the tag of a value's encoding (the second message).
const valueTag = -3

// encodeValue is v's gob encoding.
func encodeValue[T any](v *T) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, fmt.Errorf("%w: %T: %w", ErrEncode, *v, err)
	}
	return b.Bytes(), nil
}

// decodeValue decodes enc, which rank from sent, into a new T.
func decodeValue[T any](enc []byte, from int) (T, error) {
	var v T
	if err := gob.NewDecoder(bytes.NewReader(enc)).Decode(&v); err != nil {
		var zero T
		return zero, fmt.Errorf("%w: the value rank %d sent does not decode as %T: %w", ErrMismatch, from, v, err)
	}
	return v, nil
}

// SendValue sends the Go value v to rank dest with tag, encoded with
// encoding/gob, and returns when the encoding has been handed over (v may
// be changed then). RecvValue receives it, with no size needed in
// advance.
//
// A value that cannot be encoded (a channel or a function in it, a struct
// with no exported fields) fails with an error matching ErrEncode, and
// nothing of it is sent but a header that says so: the matching RecvValue
// fails with ErrEncode too, naming this rank, instead of waiting for a
// value that will not come, and the next value between the two ranks
// goes to the next receive.
//
//go:noinline
func SendValue[T any](c *Comm, v T, dest, tag int) error {
	pc := callerPC()
	enc, encErr := encodeValue(&v)
	var span uint64
	if traceOn.Load() {
		span = c.tracePost(tkSendValue, describe(enc), dest, tag, pc)
	}
	return c.traceEnd(span, c.sendValue(enc, encErr, dest, tag, pc))
}

// sendValue is SendValue's part once the value is encoded (enc, or
// encErr).
func (c *Comm) sendValue(enc []byte, encErr error, dest, tag int, pc uintptr) error {
	hdr := []int64{int64(len(enc))}
	if encErr != nil {
		hdr[0] = -1
	}
	hr, err := c.start(opSend, describe(hdr), dest, tag, pc)
	if err != nil {
		return c.opErr("send", dest, tag, err)
	}
	var pr backend.Request
	if encErr == nil {
		pr, err = c.conn.Isend(describe(enc), dest, valueTag, pc)
	}
	_, herr := c.wait(hr)
	hr.Release()
	if pr != nil {
		_, err = c.wait(pr)
		pr.Release()
	}
	if err == nil {
		err = herr
	}
	if err == nil {
		err = encErr
	}
	return c.opErr("send", dest, tag, err)
}

// RecvValue receives a Go value that SendValue sent from rank source (or
// AnySource) with tag (or AnyTag), and returns it decoded into a new T,
// with the Status of the message: who sent it, with which tag (the real
// ones, for a wildcard receive), and the length of its encoding in bytes
// as Count. A value that does not decode as T (another type was sent) is
// an error matching ErrMismatch; one its sender could not encode matches
// ErrEncode. Either way both messages of the value have been taken, so
// the next value goes to the next receive.
//
// On the nccl backend wildcards are ErrNotSupported, as for Recv.
//
//go:noinline
func RecvValue[T any](c *Comm, source, tag int) (T, Status, error) {
	pc := callerPC()
	var span uint64
	if traceOn.Load() {
		span = c.tracePost(tkRecvValue, backend.Buffer{Type: backend.Uint8}, source, tag, pc)
	}
	var zero T
	enc, st, err := c.recvValue(source, tag, pc)
	if span != 0 {
		c.traceDone(span, st, err)
	}
	if err != nil {
		return zero, st, err
	}
	v, err := decodeValue[T](enc, st.Source)
	return v, st, c.opErr("recv", st.Source, st.Tag, err)
}

// recvValue is RecvValue's part until the value is decoded: its
// encoding, and the status of its message (Count the encoding's bytes).
func (c *Comm) recvValue(source, tag int, pc uintptr) ([]byte, Status, error) {
	var zero []byte
	hdr := make([]int64, 1)
	hr, err := c.start(opRecv, describe(hdr), source, tag, pc)
	if err != nil {
		return zero, Status{}, c.opErr("recv", source, tag, err)
	}
	st, err := c.wait(hr)
	hr.Release()
	if err == nil && st.Count != 1 {
		err = fmt.Errorf("%w: rank %d sent a message of %d elements with tag %d where a value's header (1 int64) was expected", ErrMismatch, st.Source, st.Count, st.Tag)
	}
	if err != nil {
		return zero, st, c.opErr("recv", source, tag, err)
	}
	n := hdr[0]
	st.Count = max(n, 0)
	switch {
	case n == -1:
		return zero, st, c.opErr("recv", st.Source, st.Tag, fmt.Errorf("%w: rank %d could not encode the value it sent (its error says why)", ErrEncode, st.Source))
	case n < 0:
		return zero, st, c.opErr("recv", st.Source, st.Tag, fmt.Errorf("%w: rank %d sent %d with tag %d where a value's header was expected", ErrMismatch, st.Source, n, st.Tag))
	}
	enc := make([]byte, n)
	pr, err := c.conn.Irecv(describe(enc), st.Source, valueTag, pc)
	if err == nil {
		var pst Status
		pst, err = c.wait(pr)
		pr.Release()
		if err == nil && pst.Count != n {
			err = countMismatch(st.Source, pst.Count, n)
		}
	}
	if err != nil {
		return zero, st, c.opErr("recv", st.Source, st.Tag, err)
	}
	return enc, st, nil
}

// BcastValue sends root's *v to every other rank, which gets it decoded
// into a new T stored in its *v (what *v held before is replaced, not
// merged). It is a collective: every rank calls it, with the same root,
// in the same order as the other collectives; it runs as two Bcasts (the
// encoding's length, then the encoding).
//
// A value the root cannot encode fails with ErrEncode on every rank, and
// every *v is left as it was. A nil v is ErrInvalid on its rank, which
// still takes its part (so a nil v at the root is ErrEncode elsewhere).
//
//go:noinline
func BcastValue[T any](c *Comm, v *T, root int) error {
	pc := callerPC() // the two Bcasts report the program's call, in reports and on the timeline
	if c == nil {
		return c.opErr("bcastvalue", root, -1, invalidf("nil *Comm"))
	}
	if root < 0 || root >= c.size {
		return c.opErr("bcastvalue", root, -1, invalidf("root %d is not in [0, %d)", root, c.size))
	}
	var bad error
	if v == nil {
		bad = invalidf("a nil *%v", reflect.TypeFor[T]())
	}
	var enc []byte
	hdr := []int64{0}
	if c.rank == root {
		if bad == nil {
			enc, bad = encodeValue(v)
		}
		hdr[0] = int64(len(enc))
		if bad != nil {
			hdr[0] = -1
		}
	}
	if err := c.bcast(describe(hdr), root, pc); err != nil {
		return err
	}
	n := hdr[0]
	if n < 0 {
		if bad == nil {
			bad = fmt.Errorf("%w: the root (rank %d) could not encode its value (its error says why)", ErrEncode, root)
		}
		return c.opErr("bcastvalue", root, -1, bad)
	}
	if c.rank != root {
		enc = make([]byte, n)
	}
	if err := c.bcast(describe(enc), root, pc); err != nil {
		return err
	}
	if c.rank == root || bad != nil {
		return c.opErr("bcastvalue", root, -1, bad)
	}
	got, err := decodeValue[T](enc, root)
	if err == nil {
		*v = got
	}
	return c.opErr("bcastvalue", root, -1, err)
}
