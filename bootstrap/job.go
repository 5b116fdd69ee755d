// Package bootstrap answers "who am I and who are my peers" for a courier
// process: rank, size and local rank from the launcher's environment (Open
// MPI, MPICH/Hydra, PMIx, Slurm, torchrun, Flux, jsrun, courier run, or
// COURIER_* set by hand), and
// an all-gather among the ranks, served by rank 0, through which the
// transports exchange their addresses (and, for NCCL, the unique ID).
//
// FromEnv (or Detect, which also picks up the socket courier run hands
// down) says where the process stands; Connect then meets the other ranks
// and returns the Exchanger. The wire format is in PROTOCOL.md.
//
// The rendezvous is authenticated: every connection proves it knows the
// job's key, so a process of another job that reaches the address is
// refused with an error naming the mismatch, never admitted as a rank.
package bootstrap

import (
	"context"
	"net"
	"strconv"
)

// Job is one process's place in a launch.
type Job struct {
	// Rank is this process's rank, in [0, Size).
	Rank int
	// Size is the number of ranks.
	Size int
	// LocalRank is the rank among the processes on this host (it picks the
	// GPU); LocalSize is how many there are. -1 when the launcher does not say.
	LocalRank, LocalSize int
	// Launcher names what started the process: "courier", "torchrun",
	// "openmpi", "mpich", "pmix", "slurm", "flux", "jsrun", "manual"
	// (COURIER_RANK/SIZE by hand) or "single" (no launcher: one rank).
	Launcher string
	// JobID is the launcher's identity for the job ("" when it has none).
	JobID string
	// Key is the secret every rank of the job shares (COURIER_JOB_KEY, set by
	// courier run). Without one, the job's identity is derived from JobID, so
	// ranks of another job are still told apart. FromEnv then fills Key with
	// that derived value: an identity, not a secret (anyone who knows the
	// launcher and job ID can compute it). It never appears in Vars.
	Key string
	// Addr is host:port of rank 0's rendezvous (COURIER_ADDR). Rank 0
	// listens there; the others dial it.
	Addr string
	// Listener, when set on rank 0, is an already-listening socket for the
	// rendezvous (courier run hands one down; tests use port 0). It takes
	// precedence over Addr for listening. Connect takes it over and closes
	// it once every rank has joined (at once on other ranks, or with Size 1).
	Listener net.Listener
	// Vars lists the environment variables that decided rank and size, as
	// NAME=value, for error messages.
	Vars []string
	// Generation tells apart the rendezvous of several Inits of one launch
	// in one process: 0 for the first, 1 for the next, and so on (mp.Init
	// numbers them, in the order a process calls it). For Generation > 0,
	// Connect proves a key derived from Key and the generation, and names
	// the address file after it too, so ranks meet only ranks of the same
	// generation: a rank that calls Init more often than the others is
	// refused, or waits, instead of joining the wrong communicator.
	Generation int
}

// generation returns what Connect uses of j for its generation: the key,
// and the job ID that names the address file.
func (j *Job) generation(key string) (string, string) {
	if j.Generation <= 0 {
		return key, j.JobID
	}
	g := strconv.Itoa(j.Generation)
	id := j.JobID
	if id != "" {
		id += ".init" + g
	}
	return key + "\x00courier-init-generation\x00" + g, id
}

// Exchanger is the bootstrap's collective: it lets the transports of a job
// trade small blobs (addresses, a unique ID) before they have connections
// of their own.
type Exchanger interface {
	// AllGather contributes data (at most 1 MiB) and returns every rank's
	// contribution, indexed by rank. Every rank must call it the same number
	// of times.
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	// Close releases the rendezvous; rank 0 stops serving it.
	Close() error
}
