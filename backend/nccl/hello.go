package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// Open's exchanges, in two rounds. First the hello each rank contributes:
// a status byte, then either the reason it cannot join, or its host name,
// its GPU's PCI address and a byte of flags (helloIPC: its IPCEnv is on;
// helloWorld, from rank 0: it wants the communicator of every rank).
// From the hellos every rank knows which pairs share a GPU. Then, unless
// every pair does, the NCCL unique IDs: a status byte, then either the
// reason, or the IDs of this rank's send channels (one per rank; zeros
// for itself and for the ranks it meets through CUDA IPC; rank 0 has the
// ID of the communicator of every rank at its own place, or zeros for
// none). An ID is made only for a communicator that will be made:
// ncclGetUniqueId starts a listening socket and a thread that wait until
// the communicator's ranks have met, so an unused one would stay for the
// life of the process.
const (
	helloOK          = 0
	helloUnsupported = 1 // the reason matches ErrNotSupported
	helloFailed      = 2

	helloIPC   = 1 // the flag: ranks that share this rank's GPU meet it through CUDA IPC
	helloWorld = 2 // the flag: NCCL runs the collectives (CollectivesEnv), rank 0's counts
)

// encodeStatus is the reason err in the exchanges' failure form.
func encodeStatus(err error) []byte {
	st := byte(helloFailed)
	if errors.Is(err, backend.ErrNotSupported) {
		st = helloUnsupported
	}
	return append([]byte{st}, err.Error()...)
}

// decodeStatus reads the status byte of rank k's part of an exchange:
// the rest when it is helloOK, an error with the rank's reason otherwise.
func decodeStatus(k int, what string, b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("nccl: %w: rank %d sent an empty %s", backend.ErrCorrupt, k, what)
	}
	switch b[0] {
	case helloUnsupported:
		return nil, fmt.Errorf("nccl: %w: rank %d cannot join: %s", backend.ErrNotSupported, k, b[1:])
	case helloFailed:
		return nil, fmt.Errorf("nccl: rank %d cannot join: %s", k, b[1:])
	case helloOK:
		return b[1:], nil
	default:
		return nil, fmt.Errorf("nccl: %w: rank %d sent a %s of kind %d", backend.ErrCorrupt, k, what, b[0])
	}
}

func encodeHello(lo *local, err error) []byte {
	if err != nil {
		return encodeStatus(err)
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
	if lo.world {
		flags |= helloWorld
	}
	return append(b, flags)
}

// hello is what a rank said of itself, and, after the second round, the
// IDs of its send channels.
type hello struct {
	host, bus string
	ipc       bool
	world     bool
	ids       [][idBytes]byte
}

// decodeHello reads rank k's hello; an error says why rank k cannot join.
func decodeHello(k int, b []byte) (hello, error) {
	var h hello
	b, err := decodeStatus(k, "hello", b)
	if err != nil {
		return h, err
	}
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
	if len(b) != 1 || b[0]&^(helloIPC|helloWorld) != 0 {
		return h, fmt.Errorf("nccl: %w: rank %d sent a hello without its flags, with unknown ones, or with more after them", backend.ErrCorrupt, k)
	}
	h.ipc = b[0]&helloIPC != 0
	h.world = b[0]&helloWorld != 0
	return h, nil
}

// encodeIDs is a rank's part of the second round: its IDs, or why it
// could not make them.
func encodeIDs(ids [][idBytes]byte, err error) []byte {
	if err != nil {
		return encodeStatus(err)
	}
	b := make([]byte, 1, 1+len(ids)*idBytes)
	for _, id := range ids {
		b = append(b, id[:]...)
	}
	return b
}

// decodeIDs reads rank k's IDs in a job of size ranks.
func decodeIDs(k, size int, b []byte) ([][idBytes]byte, error) {
	b, err := decodeStatus(k, "list of NCCL unique IDs", b)
	if err != nil {
		return nil, err
	}
	if len(b) != size*idBytes {
		return nil, fmt.Errorf("nccl: %w: rank %d sent %d bytes of NCCL unique IDs, want %d", backend.ErrCorrupt, k, len(b), size*idBytes)
	}
	ids := make([][idBytes]byte, size)
	for p := range ids {
		copy(ids[p][:], b[p*idBytes:])
	}
	return ids, nil
}
