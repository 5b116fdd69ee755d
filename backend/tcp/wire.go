package tcp

import (
	"bufio"
	"io"

	"github.com/courier-mp/courier/internal/engine"
)

// The frames on a TCP connection are the engine's (internal/engine,
// wire.go), each a 32-byte header and, for EAGER and DATA, its payload:
// PROTOCOL.md in this folder is the specification.

// smallWrite is the largest frame copied into one buffer for a single
// write; larger payloads go out with writev, uncopied.
const smallWrite = 4 << 10

// source hands a frame's payload to the engine straight from the socket's
// read buffer into the receive buffer.
type source struct{ br *bufio.Reader }

func (s source) ReadFull(dst []byte) error {
	_, err := io.ReadFull(s.br, dst)
	return err
}

func (s source) Discard(n int) error {
	_, err := s.br.Discard(n)
	return err
}

// decode reads and validates the next frame header.
func decode(br *bufio.Reader, hb *[engine.HeaderSize]byte) (engine.Header, error) {
	if _, err := io.ReadFull(br, hb[:]); err != nil {
		return engine.Header{}, err
	}
	return engine.DecodeHeader(hb[:], engine.EagerLimit)
}
