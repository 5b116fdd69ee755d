package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
)

// ErrBadEnv reports a launcher environment that cannot be right: a rank or
// size that is not an integer or out of range, or one given without the
// other. The error that wraps it names the variables and their values.
var ErrBadEnv = errors.New("bootstrap: bad launcher environment")

// FromEnv reads this process's place in its job from the launcher's
// environment, looking variables up with getenv (os.Getenv when nil). An
// empty value counts as unset. The first launcher whose variables are
// present decides, in this order:
//
//   - courier run, or a launch by hand: COURIER_RANK and COURIER_SIZE, with
//     COURIER_LOCAL_RANK and COURIER_LOCAL_SIZE optional. The launcher is
//     "courier" when COURIER_JOB_KEY is set (courier run sets it), else
//     "manual". A local value left unset is Rank or Size for "courier" (one
//     host) and -1 for "manual".
//   - Open MPI ("openmpi"): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; the job ID is
//     OMPI_MCA_ess_base_jobid.
//   - PMIx ("pmix"): PMIX_RANK, with the size from PMIX_SIZE or, since PMIx
//     does not always export one, from COURIER_SIZE; the job ID is
//     PMIX_NAMESPACE. When neither size is set, the launchers below decide
//     if their variables are present (srun --mpi=pmix sets Slurm's);
//     otherwise the size is unknown and FromEnv fails.
//   - MPICH/Hydra ("mpich"): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
//     MPI_LOCALNRANKS; the job ID is PMI_KVSNAME, or PMI_JOBID.
//   - Slurm ("slurm"): SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS),
//     SLURM_LOCALID, and SLURM_NTASKS_PER_NODE as the local size when it is
//     a plain integer (not "2(x3)"); the job ID is SLURM_JOB_ID, followed by
//     "." and SLURM_STEP_ID when that is set.
//   - none of them: a lone process, Rank 0 of Size 1 ("single").
//
// Whatever the launcher, COURIER_ADDR goes into Addr and COURIER_JOB_KEY
// into Key. When COURIER_JOB_KEY is unset, Key is derived from Launcher and
// JobID: ranks of one job agree on it and a job with another ID gets
// another, so a rank of a different job is told apart; but it is an
// identity, not a secret, since anyone who knows the job ID can compute it.
// Vars lists the variables that decided Rank and Size (never the key).
//
// Errors wrap ErrBadEnv.
func FromEnv(getenv func(string) string) (Job, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	e := &envReader{getenv: getenv}
	src, err := e.pick()
	if err != nil {
		return Job{}, err
	}
	job, err := e.read(src)
	if err != nil {
		return Job{}, err
	}
	job.Addr = getenv("COURIER_ADDR")
	job.Key = getenv("COURIER_JOB_KEY")
	if job.Key == "" {
		job.Key = derivedKey(job.Launcher, job.JobID)
	}
	return job, nil
}

// Detect is FromEnv(os.Getenv), plus the rendezvous socket that courier run
// hands down to rank 0: when COURIER_RENDEZVOUS_FD names an inherited,
// listening socket (fd 3, from exec.Cmd.ExtraFiles), Detect wraps it in
// Job.Listener on rank 0. Other ranks ignore the descriptor. A value that
// is not a listening socket is an error wrapping ErrBadEnv.
func Detect() (Job, error) {
	job, err := FromEnv(os.Getenv)
	if err != nil {
		return Job{}, err
	}
	v := os.Getenv("COURIER_RENDEZVOUS_FD")
	if v == "" {
		return job, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return Job{}, fmt.Errorf("%w: COURIER_RENDEZVOUS_FD=%q is not a file descriptor", ErrBadEnv, v)
	}
	if job.Rank != 0 {
		return job, nil
	}
	job.Listener, err = fileListener(fd)
	if err != nil {
		return Job{}, fmt.Errorf("%w: COURIER_RENDEZVOUS_FD=%d is not a listening socket: %w", ErrBadEnv, fd, err)
	}
	return job, nil
}

// fileListener wraps the inherited descriptor fd in a net.Listener. The
// listener holds a duplicate, so fd itself is closed.
func fileListener(fd int) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), "COURIER_RENDEZVOUS_FD")
	if f == nil {
		return nil, errors.New("invalid descriptor")
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	if err := checkListening(ln); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// derivedKey is the job's key when courier run gave none: an identity
// shared by the ranks of one job, not a secret.
func derivedKey(launcher, jobID string) string {
	sum := sha256.Sum256([]byte("courier-job-identity\x00" + launcher + "\x00" + jobID))
	return "derived:" + hex.EncodeToString(sum[:16])
}

// source names the variables one launcher sets.
type source struct {
	launcher             string
	rank, size           string // required
	localRank, localSize string // optional; "" when the launcher has none
	jobID                string // the value, not a name
	localIsGlobal        bool   // unset local values default to rank and size
}

// envReader reads a launcher's variables and records those that decided.
type envReader struct {
	getenv func(string) string
	vars   []string
}

func (e *envReader) has(name string) bool { return e.getenv(name) != "" }

// pick chooses the launcher whose variables are present, in FromEnv's order.
func (e *envReader) pick() (source, error) {
	switch {
	case e.has("COURIER_RANK") || e.has("COURIER_SIZE") && !e.has("PMIX_RANK"):
		s := source{launcher: "manual", rank: "COURIER_RANK", size: "COURIER_SIZE",
			localRank: "COURIER_LOCAL_RANK", localSize: "COURIER_LOCAL_SIZE"}
		if e.has("COURIER_JOB_KEY") {
			s.launcher, s.localIsGlobal = "courier", true
		}
		return s, nil
	case e.has("OMPI_COMM_WORLD_RANK") || e.has("OMPI_COMM_WORLD_SIZE"):
		return source{launcher: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
			localRank: "OMPI_COMM_WORLD_LOCAL_RANK", localSize: "OMPI_COMM_WORLD_LOCAL_SIZE",
			jobID: e.getenv("OMPI_MCA_ess_base_jobid")}, nil
	case e.has("PMIX_RANK") && (e.has("PMIX_SIZE") || e.has("COURIER_SIZE")):
		size := "PMIX_SIZE"
		if !e.has(size) {
			size = "COURIER_SIZE"
		}
		return source{launcher: "pmix", rank: "PMIX_RANK", size: size, jobID: e.getenv("PMIX_NAMESPACE")}, nil
	case e.has("PMI_RANK") || e.has("PMI_SIZE"):
		return source{launcher: "mpich", rank: "PMI_RANK", size: "PMI_SIZE",
			localRank: "MPI_LOCALRANKID", localSize: "MPI_LOCALNRANKS",
			jobID: e.first("PMI_KVSNAME", "PMI_JOBID")}, nil
	case e.has("SLURM_PROCID"):
		return e.slurm(), nil
	case e.has("PMIX_RANK"):
		return source{}, fmt.Errorf("%w: PMIX_RANK=%s is set but the job size is unknown (PMIx does not export it): "+
			"build with -tags mpi, or set COURIER_SIZE", ErrBadEnv, e.getenv("PMIX_RANK"))
	default:
		return source{launcher: "single"}, nil
	}
}

// slurm describes a Slurm task.
func (e *envReader) slurm() source {
	s := source{launcher: "slurm", rank: "SLURM_PROCID", size: "SLURM_NTASKS", localRank: "SLURM_LOCALID"}
	if !e.has(s.size) && e.has("SLURM_NPROCS") {
		s.size = "SLURM_NPROCS"
	}
	// "2(x3),1" describes uneven nodes; only a plain count is a local size.
	if n, err := strconv.Atoi(e.getenv("SLURM_NTASKS_PER_NODE")); err == nil && n > 0 {
		s.localSize = "SLURM_NTASKS_PER_NODE"
	}
	s.jobID = e.getenv("SLURM_JOB_ID")
	if step := e.getenv("SLURM_STEP_ID"); step != "" {
		s.jobID += "." + step
	}
	return s
}

// first returns the value of the first of names that is set.
func (e *envReader) first(names ...string) string {
	for _, n := range names {
		if v := e.getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// read builds the Job that s describes.
func (e *envReader) read(s source) (Job, error) {
	if s.launcher == "single" {
		return Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: s.launcher}, nil
	}
	rank, size, err := e.ranks(s.rank, s.size)
	if err != nil {
		return Job{}, err
	}
	localRank, localSize := -1, -1
	if s.localIsGlobal {
		localRank, localSize = rank, size
	}
	localRank, localSize, err = e.local(s.localRank, s.localSize, localRank, localSize)
	if err != nil {
		return Job{}, err
	}
	return Job{Rank: rank, Size: size, LocalRank: localRank, LocalSize: localSize,
		Launcher: s.launcher, JobID: s.jobID, Vars: e.vars}, nil
}

// ranks reads the rank and size variables, both required.
func (e *envReader) ranks(rankVar, sizeVar string) (rank, size int, err error) {
	switch {
	case !e.has(rankVar):
		return 0, 0, fmt.Errorf("%w: %s is set but %s is not", ErrBadEnv, e.pair(sizeVar), rankVar)
	case !e.has(sizeVar):
		return 0, 0, fmt.Errorf("%w: %s is set but %s is not", ErrBadEnv, e.pair(rankVar), sizeVar)
	}
	if rank, _, err = e.int(rankVar); err != nil {
		return 0, 0, err
	}
	if size, _, err = e.int(sizeVar); err != nil {
		return 0, 0, err
	}
	switch {
	case rank < 0:
		return 0, 0, fmt.Errorf("%w: %s is negative", ErrBadEnv, e.pair(rankVar))
	case size < 1:
		return 0, 0, fmt.Errorf("%w: %s: the size must be at least 1", ErrBadEnv, e.pair(sizeVar))
	case rank >= size:
		return 0, 0, fmt.Errorf("%w: %s is not below %s", ErrBadEnv, e.pair(rankVar), e.pair(sizeVar))
	}
	e.vars = append(e.vars, e.pair(rankVar), e.pair(sizeVar))
	return rank, size, nil
}

// local reads the optional local rank and size variables; rank and size
// are the values to keep for those that are unset.
func (e *envReader) local(rankVar, sizeVar string, rank, size int) (int, int, error) {
	if n, ok, err := e.int(rankVar); err != nil {
		return 0, 0, err
	} else if ok {
		if n < 0 {
			return 0, 0, fmt.Errorf("%w: %s is negative", ErrBadEnv, e.pair(rankVar))
		}
		rank = n
	}
	if n, ok, err := e.int(sizeVar); err != nil {
		return 0, 0, err
	} else if ok {
		if n < 1 {
			return 0, 0, fmt.Errorf("%w: %s: the local size must be at least 1", ErrBadEnv, e.pair(sizeVar))
		}
		size = n
	}
	if rank >= 0 && size >= 0 && rank >= size {
		return 0, 0, fmt.Errorf("%w: local rank %d is not below local size %d (%s, %s)",
			ErrBadEnv, rank, size, e.pair(rankVar), e.pair(sizeVar))
	}
	return rank, size, nil
}

// int parses the integer in the variable name; ok is false when name is
// "" or the variable is unset.
func (e *envReader) int(name string) (n int, ok bool, err error) {
	if name == "" || !e.has(name) {
		return 0, false, nil
	}
	n, err = strconv.Atoi(e.getenv(name))
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s=%q is not an integer", ErrBadEnv, name, e.getenv(name))
	}
	return n, true, nil
}

// pair formats a variable as NAME=value, or "NAME unset".
func (e *envReader) pair(name string) string {
	switch {
	case name == "":
		return "(none)"
	case !e.has(name):
		return name + " unset"
	}
	return name + "=" + e.getenv(name)
}
