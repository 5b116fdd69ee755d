package bootstrap

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestMPIJob checks how a process that MPI places at rank r of n squares
// that with its launcher's environment. It needs no MPI: it runs in every
// build.
func TestMPIJob(t *testing.T) {
	ompi := map[string]string{
		"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
		"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
		"OMPI_MCA_ess_base_jobid": "12345", "COURIER_ADDR": "h:1",
	}
	const lib = "Open MPI v4.1.4"
	for _, tc := range []struct {
		name       string
		env        map[string]string
		rank, size int
		want       Job    // compared field by field, Key and Vars aside
		wantErr    string // substrings, "|"-separated; "" for no error
	}{
		{name: "mpirun", env: ompi, rank: 2, size: 4,
			want: Job{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Launcher: "mpi", JobID: "12345", Addr: "h:1"}},
		{name: "singleton", env: nil, rank: 0, size: 1,
			want: Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "mpi"}},
		{name: "launcher MPI knows but courier does not", env: nil, rank: 1, size: 3,
			want: Job{Rank: 1, Size: 3, LocalRank: -1, LocalSize: -1, Launcher: "mpi"}},
		{name: "PMIx without a size", env: map[string]string{"PMIX_RANK": "3", "PMIX_NAMESPACE": "ns"}, rank: 3, size: 8,
			want: Job{Rank: 3, Size: 8, LocalRank: -1, LocalSize: -1, Launcher: "mpi"}},
		{name: "srun with PMIx", env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_LOCALID": "1",
			"SLURM_JOB_ID": "77"}, rank: 1, size: 3,
			want: Job{Rank: 1, Size: 3, LocalRank: 1, LocalSize: -1, Launcher: "mpi", JobID: "77"}},

		{name: "alone with OMPI_COMM_WORLD_SIZE=4", env: map[string]string{"OMPI_COMM_WORLD_SIZE": "4"}, rank: 0, size: 1,
			wantErr: "one of 4 ranks (OMPI_COMM_WORLD_SIZE=4)|MPI sees it alone|links Open MPI v4.1.4|-tags mpi|OMPI_COMM_WORLD_RANK is not"},
		{name: "alone with Open MPI's variables", env: ompi, rank: 0, size: 1,
			wantErr: "one of 4 ranks (OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4)|MPI sees it alone"},
		{name: "Open MPI binary under MPICH's mpiexec", env: map[string]string{"PMI_RANK": "1", "PMI_SIZE": "4"}, rank: 0, size: 1,
			wantErr: "one of 4 ranks (PMI_RANK=1 PMI_SIZE=4)|mpiexec"},
		{name: "srun without --mpi=pmix", env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "3"}, rank: 0, size: 1,
			wantErr: "one of 3 ranks (SLURM_PROCID=1 SLURM_NTASKS=3)|srun without --mpi=pmix"},
		{name: "alone with PMIX_SIZE=4", env: map[string]string{"PMIX_SIZE": "4"}, rank: 0, size: 1,
			wantErr: "one of 4 ranks (PMIX_SIZE=4)"},
		{name: "alone with a bad environment", env: map[string]string{"PMIX_RANK": "3"}, rank: 0, size: 1,
			wantErr: "PMIX_RANK=3 is set but the job size is unknown"},
		{name: "sizes disagree", env: ompi, rank: 2, size: 8,
			wantErr: "MPI says this process is rank 2 of 8|rank 2 of 4|must agree"},
		{name: "ranks disagree", env: ompi, rank: 1, size: 4,
			wantErr: "MPI says this process is rank 1 of 4|rank 2 of 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			job, err := mpiJob(getenv, tc.rank, tc.size, lib)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("mpiJob = %+v, want an error", job)
				}
				if !errors.Is(err, ErrBadEnv) {
					t.Errorf("error %q does not wrap ErrBadEnv", err)
				}
				for _, s := range strings.Split(tc.wantErr, "|") {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if job.Key == "" {
				t.Error("no Key")
			}
			if env, err := FromEnv(getenv); err == nil && job.Key != env.Key {
				t.Errorf("Key %q, want the environment's %q", job.Key, env.Key)
			}
			got := job
			got.Key, got.Vars = "", nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mpiJob =\n%+v, want\n%+v", got, tc.want)
			}
		})
	}
}

func TestMPIJobKey(t *testing.T) {
	env := map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "COURIER_JOB_KEY": "secret"}
	job, err := mpiJob(func(k string) string { return env[k] }, 0, 2, "")
	if err != nil || job.Key != "secret" {
		t.Errorf("mpiJob = %+v, %v; want Key from COURIER_JOB_KEY", job, err)
	}
	if strings.Join(job.Vars, " ") != "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2" {
		t.Errorf("Vars = %q", job.Vars)
	}
	env = map[string]string{"PMIX_RANK": "1", "COURIER_JOB_KEY": "secret"}
	if job, err = mpiJob(func(k string) string { return env[k] }, 1, 2, ""); err != nil || job.Key != "secret" {
		t.Errorf("mpiJob = %+v, %v; want Key from COURIER_JOB_KEY", job, err)
	}
}

func TestLaunchedByCourier(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"COURIER_RANK": "1", "COURIER_SIZE": "2", "COURIER_JOB_KEY": "k"}, true},
		{map[string]string{"COURIER_RANK": "1", "COURIER_SIZE": "2"}, true},
		{map[string]string{"COURIER_SIZE": "2"}, false}, // not a launch: an error MPI may resolve
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, false},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, true},
		{nil, false},
	} {
		if got := launchedByCourier(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("launchedByCourier(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}
