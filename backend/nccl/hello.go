package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// The hello each rank contributes to the exchange: a status byte, then
// either the reason it cannot join, or its host name, its GPU's PCI
// address, a byte of flags (helloIPC: its IPCEnv is on) and the NCCL
// unique IDs of its send channels (one per rank,
// zeros for itself; rank 0 has the ID of the communicator of every rank
// there, or zeros for none).
const (
	helloOK          = 0
	helloUnsupported = 1 // the reason matches ErrNotSupported
	helloFailed      = 2

	helloIPC = 1 // the flag: ranks that share this rank's GPU meet it through CUDA IPC
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
	var flags byte
	if lo.ipc {
		flags |= helloIPC
	}
	b = append(b, flags)
	for _, id := range lo.ids {
		b = append(b, id[:]...)
	}
	return b
}

type hello struct {
	host, bus string
	ipc       bool
	ids       [][idBytes]byte
}

// decodeHello reads rank k's hello in a job of size ranks; an error says
// why rank k cannot join.
func decodeHello(k, size int, b []byte) (hello, error) {
	var h hello
	if len(b) == 0 {
		return h, fmt.Errorf("nccl: %w: rank %d sent an empty hello", backend.ErrCorrupt, k)
	}
	switch b[0] {
	case helloUnsupported:
		return h, fmt.Errorf("nccl: %w: rank %d cannot join: %s", backend.ErrNotSupported, k, b[1:])
	case helloFailed:
		return h, fmt.Errorf("nccl: rank %d cannot join: %s", k, b[1:])
	case helloOK:
	default:
		return h, fmt.Errorf("nccl: %w: rank %d sent a hello of kind %d", backend.ErrCorrupt, k, b[0])
	}
	b = b[1:]
	var fields [2]string
	for i := range fields {
		if len(b) < 2 {
			return h, fmt.Errorf("nccl: %w: rank %d sent a short hello", backend.ErrCorrupt, k)
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return h, fmt.Errorf("nccl: %w: rank %d sent a short hello", backend.ErrCorrupt, k)
		}
		fields[i] = string(b[2 : 2+n])
		b = b[2+n:]
	}
	h.host, h.bus = fields[0], fields[1]
	if len(b) < 1 || b[0]&^helloIPC != 0 {
		return h, fmt.Errorf("nccl: %w: rank %d sent a hello without its flags, or unknown ones", backend.ErrCorrupt, k)
	}
	h.ipc = b[0]&helloIPC != 0
	b = b[1:]
	if len(b) != size*idBytes {
		return h, fmt.Errorf("nccl: %w: rank %d sent %d bytes of NCCL unique IDs, want %d", backend.ErrCorrupt, k, len(b), size*idBytes)
	}
	h.ids = make([][idBytes]byte, size)
	for p := range h.ids {
		copy(h.ids[p][:], b[p*idBytes:])
	}
	return h, nil
}
