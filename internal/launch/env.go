package launch

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// The environment variables courier run sets in every rank. courier's
// bootstrap reads them.
const (
	// EnvRank is the rank of the process, in [0, size).
	EnvRank = "COURIER_RANK"
	// EnvSize is the number of ranks in the job.
	EnvSize = "COURIER_SIZE"
	// EnvLocalRank is the rank among the processes on this host; courier
	// run starts every rank on one host, so it equals the rank.
	EnvLocalRank = "COURIER_LOCAL_RANK"
	// EnvLocalSize is the number of ranks on this host (the job's size).
	EnvLocalSize = "COURIER_LOCAL_SIZE"
	// EnvAddr is host:port of rank 0's rendezvous socket.
	EnvAddr = "COURIER_ADDR"
	// EnvJobKey is the secret every rank of one job shares: 32 hex digits.
	EnvJobKey = "COURIER_JOB_KEY"
	// EnvRendezvousFD is set in rank 0 only: the number of the inherited
	// file descriptor that is already listening at EnvAddr.
	EnvRendezvousFD = "COURIER_RENDEZVOUS_FD"
)

// RendezvousFD is the descriptor number under which rank 0 inherits the
// listening rendezvous socket (the first of exec.Cmd.ExtraFiles).
const RendezvousFD = 3

// JobKeyLen is the length of a job key in hex digits.
const JobKeyLen = 32

// NewJobKey returns a fresh job key: 16 bytes from crypto/rand as 32
// lowercase hex digits.
func NewJobKey() string {
	var b [JobKeyLen / 2]byte
	rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// IsLauncherVar reports whether the environment variable named key tells a
// process its place in a job: the variables courier run sets, and those of
// Open MPI (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_*, MPI_LOCALRANKID,
// MPI_LOCALNRANKS), PMIx (PMIX_*) and Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_NPROCS, SLURM_LOCALID). ChildEnv removes them from what a rank
// inherits, so that a courier run started inside another launcher's job
// (or from a shell where COURIER_RANK was exported by hand) cannot give its
// ranks conflicting answers.
func IsLauncherVar(key string) bool {
	switch key {
	case EnvRank, EnvSize, EnvLocalRank, EnvLocalSize, EnvAddr, EnvJobKey, EnvRendezvousFD, EnvControlFD,
		"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID",
		"MPI_LOCALRANKID", "MPI_LOCALNRANKS":
		return true
	}
	return strings.HasPrefix(key, "OMPI_COMM_WORLD_") ||
		strings.HasPrefix(key, "PMI_") ||
		strings.HasPrefix(key, "PMIX_")
}

// ChildEnv returns the environment of rank rank of a job of size ranks:
// parent (as from os.Environ) without the variables IsLauncherVar names,
// followed by EnvRank, EnvSize, EnvLocalRank, EnvLocalSize, EnvAddr=addr and
// EnvJobKey=jobKey, and, when rendezvous is true (rank 0),
// EnvRendezvousFD=3. parent is not modified.
func ChildEnv(parent []string, rank, size int, addr, jobKey string, rendezvous bool) []string {
	env := make([]string, 0, len(parent)+7)
	for _, kv := range parent {
		key, _, _ := strings.Cut(kv, "=")
		if !IsLauncherVar(key) {
			env = append(env, kv)
		}
	}
	r, s := strconv.Itoa(rank), strconv.Itoa(size)
	env = append(env,
		EnvRank+"="+r,
		EnvSize+"="+s,
		EnvLocalRank+"="+r,
		EnvLocalSize+"="+s,
		EnvAddr+"="+addr,
		EnvJobKey+"="+jobKey,
	)
	if rendezvous {
		env = append(env, EnvRendezvousFD+"="+strconv.Itoa(RendezvousFD))
	}
	return env
}
