package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/courier-mp/courier/internal/errs"
)

// ErrBadEnv reports a launcher environment that cannot be right: a rank or
// size that is not an integer or out of range, or one given without the
// other. The error that wraps it names the variables and their values. It
// matches errs.ErrInvalid (mp.ErrInvalid).
var ErrBadEnv = sentinel("bootstrap: bad launcher environment", errs.ErrInvalid)

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
//   - torchrun, and torch.distributed's env:// contract ("torchrun"):
//     RANK and WORLD_SIZE, with LOCAL_RANK and LOCAL_WORLD_SIZE, taken as
//     torchrun's when TORCHELASTIC_RUN_ID is set or MASTER_ADDR and
//     MASTER_PORT are (RANK alone is too common a name to trust). Rank 0's
//     rendezvous is at MASTER_ADDR and the port after MASTER_PORT, unless
//     COURIER_ADDR says otherwise: torchrun's agent keeps its own store on
//     MASTER_PORT itself. The job ID is TORCHELASTIC_RUN_ID (or "env"),
//     MASTER_ADDR:MASTER_PORT and TORCHELASTIC_RESTART_COUNT, so a rank of
//     a restarted attempt never meets one of an earlier attempt. torchrun's
//     variables come before the MPI launchers' and Slurm's, which a worker
//     inherits from the torchrun that srun or mpirun started.
//   - Open MPI ("openmpi"): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; the job ID is
//     OMPI_MCA_ess_base_jobid, else PMIX_NAMESPACE (Open MPI 4.1's mpirun
//     sets both, to the same number).
//   - PMIx ("pmix"): PMIX_RANK, with the size from PMIX_SIZE or, since PMIx
//     does not always export one, from COURIER_SIZE; the job ID is
//     PMIX_NAMESPACE. When neither size is set, the launchers below decide
//     if their variables are present (srun --mpi=pmix sets Slurm's);
//     otherwise the size is unknown and FromEnv fails.
//   - Flux ("flux"): FLUX_TASK_RANK, FLUX_JOB_SIZE, FLUX_TASK_LOCAL_ID,
//     and the local size when FLUX_JOB_NNODES is 1 (the job size); the job
//     ID is FLUX_JOB_ID. (Flux also serves PMI; its own variables decide.)
//   - IBM LSF's jsrun ("jsrun"): JSM_NAMESPACE_RANK, JSM_NAMESPACE_SIZE,
//     JSM_NAMESPACE_LOCAL_RANK, JSM_NAMESPACE_LOCAL_SIZE; the job ID is
//     LSB_JOBID.
//   - MPICH/Hydra ("mpich"): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
//     MPI_LOCALNRANKS; the job ID is PMI_KVSNAME, or PMI_JOBID. (Hydra sets
//     neither: Detect asks it over PMI_FD.)
//   - Slurm ("slurm"): SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS),
//     SLURM_LOCALID, and SLURM_NTASKS_PER_NODE as the local size when it is
//     a plain integer (not "2(x3)"), else this node's count in srun's
//     SLURM_STEP_TASKS_PER_NODE ("2(x3),1", indexed by SLURM_NODEID, which
//     "2(x3)" does not need); the job ID is SLURM_JOB_ID,
//     followed by "." and SLURM_STEP_ID when that is set.
//   - none of them: a lone process, Rank 0 of Size 1 ("single").
//
// Whatever the launcher, COURIER_ADDR goes into Addr (for torchrun, in
// place of the address derived from MASTER_ADDR and MASTER_PORT) and
// COURIER_JOB_KEY into Key. When COURIER_JOB_KEY is unset, Key is derived from Launcher and
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
	if job.Addr == "" {
		job.Addr = src.addr
	}
	job.Key = getenv("COURIER_JOB_KEY")
	if job.Key == "" {
		job.Key = derivedKey(job.Launcher, job.JobID)
	}
	return job, nil
}

// Detect is FromEnv(os.Getenv), plus what only the process itself can
// learn:
//
//   - the rendezvous socket that courier run hands down to rank 0: when
//     COURIER_RENDEZVOUS_FD names an inherited, listening socket (fd 3,
//     from exec.Cmd.ExtraFiles), Detect gives rank 0 a lease on it in
//     Job.Listener. The socket stays the process's: closing the lease
//     stops accepting on it but leaves it listening, and the next Detect
//     (of the process's next Init) gets a new lease, so that Init can be
//     called again. Other ranks ignore the descriptor. A value that is not
//     a listening socket is an error wrapping ErrBadEnv.
//   - the job ID of an MPICH/Hydra launch, which Hydra does not export:
//     with several ranks, no PMI_KVSNAME or PMI_JOBID, and PMI_FD set,
//     Detect asks the process manager for the job's KVS name over PMI_FD
//     (PMI-1 wire protocol: init, get_my_kvsname, finalize), and derives
//     the key from it unless COURIER_JOB_KEY is set. When that fails,
//     JobID stays empty; with no COURIER_ADDR either, the error is
//     Detect's, wrapping ErrBadEnv.
//
// Built with -tags mpi, Detect initialises MPI (once per process) and takes
// rank and size from MPI_COMM_WORLD (Launcher "mpi"), keeping the
// environment's local rank and size, JobID and Key; MPI seeing this process
// alone while the environment says the job has more ranks is an error
// wrapping ErrBadEnv. A process started by courier run, by torchrun, or
// with COURIER_RANK and COURIER_SIZE, is detected as without the tag
// (mpi.go).
func Detect() (Job, error) {
	if job, handled, err := detectMPI(); handled {
		return job, err
	}
	job, err := FromEnv(os.Getenv)
	if err != nil {
		return Job{}, err
	}
	if job.Launcher == "mpich" && job.JobID == "" && job.Size > 1 && os.Getenv("PMI_FD") != "" {
		id, err := pmiJobID(os.Getenv("PMI_FD"))
		switch {
		case err == nil:
			job.JobID = id
			if os.Getenv("COURIER_JOB_KEY") == "" {
				job.Key = derivedKey(job.Launcher, job.JobID)
			}
		case job.Addr == "":
			return Job{}, fmt.Errorf("%w: PMI_RANK=%d PMI_SIZE=%d: asking the process manager for the job ID over PMI_FD=%s: %w",
				ErrBadEnv, job.Rank, job.Size, os.Getenv("PMI_FD"), err)
		}
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
	job.Listener, err = inheritedListener(fd)
	if err != nil {
		return Job{}, fmt.Errorf("%w: COURIER_RENDEZVOUS_FD=%d is not a listening socket: %w", ErrBadEnv, fd, err)
	}
	return job, nil
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
	// localCount is the local size when no variable gives it as a plain
	// integer (Slurm's per-node lists); 0 when unknown.
	localCount int
	// addr is rank 0's rendezvous address the launcher's variables imply
	// (torchrun's MASTER_ADDR); COURIER_ADDR overrides it.
	addr string
	// extra are variables beside rank and size that decided the launch,
	// for Vars.
	extra []string
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
	case (e.has("RANK") || e.has("WORLD_SIZE")) && (e.has("TORCHELASTIC_RUN_ID") || e.has("MASTER_ADDR") && e.has("MASTER_PORT")):
		return e.torchrun()
	case e.has("OMPI_COMM_WORLD_RANK") || e.has("OMPI_COMM_WORLD_SIZE"):
		return source{launcher: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
			localRank: "OMPI_COMM_WORLD_LOCAL_RANK", localSize: "OMPI_COMM_WORLD_LOCAL_SIZE",
			jobID: e.first("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE")}, nil
	case e.has("PMIX_RANK") && (e.has("PMIX_SIZE") || e.has("COURIER_SIZE")):
		size := "PMIX_SIZE"
		if !e.has(size) {
			size = "COURIER_SIZE"
		}
		return source{launcher: "pmix", rank: "PMIX_RANK", size: size, jobID: e.getenv("PMIX_NAMESPACE")}, nil
	case e.has("FLUX_TASK_RANK") || e.has("FLUX_JOB_SIZE"):
		s := source{launcher: "flux", rank: "FLUX_TASK_RANK", size: "FLUX_JOB_SIZE",
			localRank: "FLUX_TASK_LOCAL_ID", jobID: e.getenv("FLUX_JOB_ID")}
		if e.getenv("FLUX_JOB_NNODES") == "1" {
			s.localSize = "FLUX_JOB_SIZE"
		}
		return s, nil
	case e.has("JSM_NAMESPACE_RANK") || e.has("JSM_NAMESPACE_SIZE"):
		return source{launcher: "jsrun", rank: "JSM_NAMESPACE_RANK", size: "JSM_NAMESPACE_SIZE",
			localRank: "JSM_NAMESPACE_LOCAL_RANK", localSize: "JSM_NAMESPACE_LOCAL_SIZE",
			jobID: e.getenv("LSB_JOBID")}, nil
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

// torchPortOffset is how far above MASTER_PORT rank 0's rendezvous
// listens under torchrun: MASTER_PORT itself is the agent's store.
const torchPortOffset = 1

// torchrun describes a worker of torchrun (or of a launch that follows
// torch.distributed's env:// contract).
func (e *envReader) torchrun() (source, error) {
	s := source{launcher: "torchrun", rank: "RANK", size: "WORLD_SIZE",
		localRank: "LOCAL_RANK", localSize: "LOCAL_WORLD_SIZE"}
	run := e.getenv("TORCHELASTIC_RUN_ID")
	if run == "" {
		run = "env"
	}
	host, port := e.getenv("MASTER_ADDR"), e.getenv("MASTER_PORT")
	s.jobID = run
	if host != "" || port != "" {
		s.jobID += "@" + net.JoinHostPort(host, port)
	}
	if n := e.getenv("TORCHELASTIC_RESTART_COUNT"); n != "" {
		s.jobID += "#" + n
	}
	if host == "" || port == "" || e.has("COURIER_ADDR") {
		return s, nil // no address of its own: COURIER_ADDR, or Connect says what to set
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n+torchPortOffset > 65535 {
		return source{}, fmt.Errorf("%w: MASTER_PORT=%q is not a port below 65535 (courier's rendezvous "+
			"listens on the next one; set COURIER_ADDR=host:port to choose another)", ErrBadEnv, port)
	}
	s.addr = net.JoinHostPort(host, strconv.Itoa(n+torchPortOffset))
	s.extra = []string{e.pair("MASTER_ADDR"), e.pair("MASTER_PORT")}
	return s, nil
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
	} else {
		s.localCount = tasksOnNode(e.getenv("SLURM_STEP_TASKS_PER_NODE"), e.getenv("SLURM_NODEID"))
	}
	s.jobID = e.getenv("SLURM_JOB_ID")
	if step := e.getenv("SLURM_STEP_ID"); step != "" {
		s.jobID += "." + step
	}
	return s
}

// tasksOnNode reads a Slurm task count list such as "2(x3),1" (three nodes
// of 2 tasks, then one of 1) and returns the count of node nodeID, or of
// the only kind of node when the list has one; 0 when it cannot tell.
func tasksOnNode(list, nodeID string) int {
	if list == "" {
		return 0
	}
	node := -1
	if nodeID != "" {
		n, err := strconv.Atoi(nodeID)
		if err != nil || n < 0 {
			return 0
		}
		node = n
	}
	items := strings.Split(list, ",")
	for _, item := range items {
		count, times := item, "1"
		if open := strings.IndexByte(item, '('); open >= 0 {
			if !strings.HasPrefix(item[open:], "(x") || !strings.HasSuffix(item, ")") {
				return 0
			}
			count, times = item[:open], item[open+2:len(item)-1]
		}
		c, err1 := strconv.Atoi(count)
		m, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || c < 1 || m < 1 {
			return 0
		}
		switch {
		case node < 0 && len(items) == 1:
			return c
		case node < 0:
			return 0
		case node < m:
			return c
		}
		node -= m
	}
	return 0
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
	if s.localCount > 0 {
		if localRank >= s.localCount {
			return Job{}, fmt.Errorf("%w: local rank %d is not below this node's task count %d (%s, %s, %s)", ErrBadEnv,
				localRank, s.localCount, e.pair(s.localRank), e.pair("SLURM_STEP_TASKS_PER_NODE"), e.pair("SLURM_NODEID"))
		}
		localSize = s.localCount
	}
	return Job{Rank: rank, Size: size, LocalRank: localRank, LocalSize: localSize,
		Launcher: s.launcher, JobID: s.jobID, Vars: append(e.vars, s.extra...)}, nil
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
