package bootstrap

import (
	"os"
	"testing"
)

// launcherVars are every variable FromEnv and Detect read; Detect's tests
// blank them so that the environment the tests run in cannot interfere.
var launcherVars = []string{
	"COURIER_RANK", "COURIER_SIZE", "COURIER_LOCAL_RANK", "COURIER_LOCAL_SIZE", "COURIER_JOB_KEY",
	"COURIER_ADDR", "COURIER_RENDEZVOUS_FD",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
	"PMIX_RANK", "PMIX_SIZE", "PMIX_NAMESPACE",
	"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI_KVSNAME", "PMI_JOBID",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
	"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "PMI_FD",
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
	"FLUX_TASK_RANK", "FLUX_JOB_SIZE", "FLUX_TASK_LOCAL_ID", "FLUX_JOB_ID", "FLUX_JOB_NNODES",
	"JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_LOCAL_SIZE", "LSB_JOBID",
}

func setEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, k := range launcherVars {
		// Unset, not set empty (t.Setenv restores it after the test): an
		// MPI library reads some of them (Open MPI's components for LSF
		// and Flux) by their presence, and a singleton's MPI_Init fails.
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}
