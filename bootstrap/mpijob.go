package bootstrap

import (
	"fmt"
	"strconv"
	"strings"
)

// This file holds the part of the MPI bootstrap that needs no MPI: how a
// process that MPI places at rank r of n squares that with what its
// launcher's environment says. It is built with and without -tags mpi, so
// that its tests run everywhere; only mpi.go calls it.

// mpiLauncher is Job.Launcher for a job whose rank and size come from MPI.
const mpiLauncher = "mpi"

// mpiSizeVars are the size variables of the MPI launchers. Any of them
// above 1 in the environment of a process that MPI sees alone means the
// process was not started by the MPI it links, even when the rest of the
// launcher's variables are missing or wrong.
var mpiSizeVars = []string{"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}

// launchedByCourier reports whether courier run, a launch by hand
// (COURIER_RANK and COURIER_SIZE) or torchrun started the process: those
// launches use courier's own rendezvous even in a binary that links MPI
// (torchrun starts no MPI job).
func launchedByCourier(getenv func(string) string) bool {
	job, err := FromEnv(getenv)
	return err == nil && (job.Launcher == "courier" || job.Launcher == "manual" || job.Launcher == "torchrun")
}

// mpiJob is the Job of a process that MPI places at rank of size, checked
// against the launcher's environment (read through getenv). library names
// the linked MPI, for the error message.
//
// Rank and size are MPI's; LocalRank and LocalSize are the environment's
// when it agrees with MPI, else -1; JobID, Key, Addr and Vars are the
// environment's. It is an error wrapping ErrBadEnv when MPI sees this
// process alone but the environment says the job has more ranks (the
// process was not started by the launcher of the MPI it links), or when
// both say several ranks and they disagree. An environment FromEnv refuses
// is an error only when MPI sees this process alone: with several ranks,
// MPI knows better (PMIx, for one, exports no size).
func mpiJob(getenv func(string) string, rank, size int, library string) (Job, error) {
	env, envErr := FromEnv(getenv)
	job := Job{Rank: rank, Size: size, LocalRank: -1, LocalSize: -1, Launcher: mpiLauncher,
		JobID: env.JobID, Key: env.Key, Addr: getenv("COURIER_ADDR"), Vars: env.Vars}
	claims := claimedSizes(getenv)
	if envErr != nil {
		job.Key = getenv("COURIER_JOB_KEY")
		if job.Key == "" {
			job.Key = derivedKey(mpiLauncher, "")
		}
		job.Vars = claims
	}
	switch {
	case size == 1 && (envErr == nil && env.Size > 1 || len(claims) > 0):
		return Job{}, aloneError(env, envErr, claims, library)
	case envErr != nil && size == 1:
		return Job{}, envErr
	case envErr != nil:
		return job, nil
	case env.Size > 1 && (env.Size != size || env.Rank != rank):
		return Job{}, fmt.Errorf("%w: MPI says this process is rank %d of %d, but its launcher's environment says rank %d of %d (%s); they must agree",
			ErrBadEnv, rank, size, env.Rank, env.Size, strings.Join(env.Vars, " "))
	case env.Size == size && env.Rank == rank:
		job.LocalRank, job.LocalSize = env.LocalRank, env.LocalSize
	}
	return job, nil
}

// claimedSizes lists, as NAME=value, the MPI launchers' size variables
// that say the job has more than one rank.
func claimedSizes(getenv func(string) string) []string {
	var claims []string
	for _, name := range mpiSizeVars {
		if n, err := strconv.Atoi(getenv(name)); err == nil && n > 1 {
			claims = append(claims, name+"="+getenv(name))
		}
	}
	return claims
}

// aloneError explains a process that MPI sees alone although its
// environment says it is one of several ranks.
func aloneError(env Job, envErr error, claims []string, library string) error {
	said, vars := env.Size, env.Vars
	if envErr != nil || env.Size <= 1 {
		said, vars = 0, claims
		for _, c := range claims {
			if n, _ := strconv.Atoi(c[strings.IndexByte(c, '=')+1:]); n > said {
				said = n
			}
		}
	}
	if library == "" {
		library = "an MPI library"
	}
	msg := fmt.Sprintf("the launcher's environment says this process is one of %d ranks (%s), "+
		"but MPI sees it alone (MPI_COMM_WORLD has 1 rank): this binary was built with -tags mpi and links %s, "+
		"and it was not started by that MPI's launcher (it was started by hand with a launcher's variables in its environment, "+
		"or by another MPI's mpirun or mpiexec, or by srun without --mpi=pmix). "+
		"Start it with the mpirun of the MPI it links, or build it without -tags mpi to meet over courier's own rendezvous",
		said, strings.Join(vars, " "), library)
	if envErr != nil {
		msg += "; besides, " + strings.TrimPrefix(envErr.Error(), ErrBadEnv.Error()+": ")
	}
	return fmt.Errorf("%w: %s", ErrBadEnv, msg)
}
