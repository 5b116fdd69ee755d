package nccl

import (
	"fmt"
	"strings"

	"github.com/courier-mp/courier/backend"
)

const (
	// LibraryEnv names the variable that overrides the library's path.
	LibraryEnv = "COURIER_NCCL_LIBRARY"
	// DefaultLibrary is the library loaded when LibraryEnv is unset.
	DefaultLibrary = "libnccl.so.2"
	// DeviceEnv names the variable that picks the GPU (an ordinal),
	// instead of the local rank.
	DeviceEnv = backend.DeviceEnv
	// BlockingEnv names the variable that chooses the kind of NCCL
	// communicator: 1 or unset, blocking ones (a group is launched in the
	// calling thread; the default), 0, non-blocking ones (each
	// ncclGroupEnd goes to a thread NCCL starts for it, which costs
	// milliseconds per group in NCCL 2.28, but NCCL can abort their
	// creation). Anything else makes Open fail with ErrInvalid.
	BlockingEnv = "COURIER_NCCL_BLOCKING"
	// EventsEnv names the variable that, set to 1, makes the backend tell
	// that a group is done by querying a CUDA event recorded after it,
	// instead of by reading the word its channel's stream writes into
	// page-locked memory after it (the default where the driver can write
	// one: a memory load instead of a driver call per poll); the same for
	// the CUDA IPC path's batches of copies. For comparisons; anything but
	// 0, 1 or unset makes Open fail with ErrInvalid.
	EventsEnv = "COURIER_NCCL_EVENTS"
	// SharedStreamEnv names the variable that, set to 0, keeps each
	// direction between two ranks on a CUDA stream of its own. By default
	// (1 or unset) the two directions also share a stream, which they use
	// whenever that cannot make one wait for the other (a ping-pong is
	// faster on one stream). For comparisons; anything but 0, 1 or unset
	// makes Open fail with ErrInvalid.
	SharedStreamEnv = "COURIER_NCCL_SHARED_STREAM"
	// CollectivesEnv names the variable that, set to 0 on rank 0, makes
	// Open skip the NCCL communicator of every rank, which runs the
	// collectives (mp.Allreduce, …): they then run over point-to-point
	// messages, host memory and the host connection, as on tcp. By
	// default (1 or unset) Open makes it beside the channels. Rank 0's
	// setting decides for every rank; anything but 0, 1 or unset makes
	// Open fail with ErrInvalid.
	CollectivesEnv = "COURIER_NCCL_COLLECTIVES"
	// IPCEnv names the variable that, set to 0, turns the IPC path off:
	// ranks that share a GPU are then refused at Open, as NCCL refuses
	// them. By default (1 or unset) their messages go through CUDA IPC
	// (ipc.go). Every rank must agree (a rank's hello says its setting);
	// anything but 0, 1 or unset makes Open fail with ErrInvalid.
	IPCEnv = "COURIER_CUDA_IPC"
)

// ipcMode reads IPCEnv: whether ranks that share a GPU meet through CUDA
// IPC.
func ipcMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, IPCEnv, true, "ranks that share a GPU meet through CUDA IPC", "they are refused")
}

// libraryPath is the library to load, as getenv sees LibraryEnv.
func libraryPath(getenv func(string) string) string {
	if p := strings.TrimSpace(getenv(LibraryEnv)); p != "" {
		return p
	}
	return DefaultLibrary
}

// collectivesMode reads CollectivesEnv: whether Open makes the
// communicator of every rank.
func collectivesMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, CollectivesEnv, true, "NCCL runs the collectives", "they run over point-to-point messages")
}

// blockingMode reads BlockingEnv: whether the channels are blocking
// communicators.
func blockingMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, BlockingEnv, true, "blocking communicators", "non-blocking ones")
}

// eventsMode reads EventsEnv: whether completion is told by events.
func eventsMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, EventsEnv, false, "completion told by CUDA events", "by words in page-locked memory")
}

// sharedStreamMode reads SharedStreamEnv: whether the two channels of a
// pair of ranks share a stream where they can.
func sharedStreamMode(getenv func(string) string) (bool, error) {
	return envSwitch(getenv, SharedStreamEnv, true, "the directions of a pair share a stream where they can", "a stream per direction")
}

// envSwitch reads the variable name as 1 (true), 0 (false) or unset (def);
// anything else is an error matching ErrInvalid that says what 1 and 0
// mean (on and off) and which is the default.
func envSwitch(getenv func(string) string, name string, def bool, on, off string) (bool, error) {
	switch v := strings.TrimSpace(getenv(name)); v {
	case "":
		return def, nil
	case "1":
		return true, nil
	case "0":
		return false, nil
	default:
		if def {
			on += ", the default"
		} else {
			off += ", the default"
		}
		return false, fmt.Errorf("nccl: %w: %s=%q: want 1 (%s) or 0 (%s)", backend.ErrInvalid, name, v, on, off)
	}
}
