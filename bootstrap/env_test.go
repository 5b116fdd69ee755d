package bootstrap

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// env turns a map into a getenv.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Job // Key and Addr are checked by other tests
	}{
		{
			name: "no launcher",
			env:  map[string]string{"HOME": "/root"},
			want: Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "single"},
		},
		{
			name: "manual",
			env:  map[string]string{"COURIER_RANK": "1", "COURIER_SIZE": "4"},
			want: Job{Rank: 1, Size: 4, LocalRank: -1, LocalSize: -1, Launcher: "manual",
				Vars: []string{"COURIER_RANK=1", "COURIER_SIZE=4"}},
		},
		{
			name: "manual with local",
			env: map[string]string{"COURIER_RANK": "3", "COURIER_SIZE": "4",
				"COURIER_LOCAL_RANK": "1", "COURIER_LOCAL_SIZE": "2"},
			want: Job{Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2, Launcher: "manual",
				Vars: []string{"COURIER_RANK=3", "COURIER_SIZE=4"}},
		},
		{
			name: "manual with local rank only",
			env:  map[string]string{"COURIER_RANK": "3", "COURIER_SIZE": "4", "COURIER_LOCAL_RANK": "1"},
			want: Job{Rank: 3, Size: 4, LocalRank: 1, LocalSize: -1, Launcher: "manual",
				Vars: []string{"COURIER_RANK=3", "COURIER_SIZE=4"}},
		},
		{
			name: "courier run",
			env:  map[string]string{"COURIER_RANK": "2", "COURIER_SIZE": "3", "COURIER_JOB_KEY": "s3cret"},
			want: Job{Rank: 2, Size: 3, LocalRank: 2, LocalSize: 3, Launcher: "courier",
				Vars: []string{"COURIER_RANK=2", "COURIER_SIZE=3"}},
		},
		{
			name: "courier run with local",
			env: map[string]string{"COURIER_RANK": "2", "COURIER_SIZE": "3", "COURIER_JOB_KEY": "s3cret",
				"COURIER_LOCAL_RANK": "0", "COURIER_LOCAL_SIZE": "1"},
			want: Job{Rank: 2, Size: 3, LocalRank: 0, LocalSize: 1, Launcher: "courier",
				Vars: []string{"COURIER_RANK=2", "COURIER_SIZE=3"}},
		},
		{
			name: "openmpi",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
				"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
				"OMPI_MCA_ess_base_jobid": "2731540481"},
			want: Job{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Launcher: "openmpi", JobID: "2731540481",
				Vars: []string{"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8"}},
		},
		{
			name: "openmpi with the job ID in PMIX_NAMESPACE only",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
				"PMIX_NAMESPACE": "779616257", "PMIX_RANK": "1"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "openmpi", JobID: "779616257",
				Vars: []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"}},
		},
		{
			name: "openmpi without local",
			env:  map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
			want: Job{Rank: 0, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "openmpi",
				Vars: []string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"}},
		},
		{
			name: "pmix with PMIX_SIZE",
			env:  map[string]string{"PMIX_RANK": "3", "PMIX_SIZE": "4", "PMIX_NAMESPACE": "prterun-host-1234@1"},
			want: Job{Rank: 3, Size: 4, LocalRank: -1, LocalSize: -1, Launcher: "pmix", JobID: "prterun-host-1234@1",
				Vars: []string{"PMIX_RANK=3", "PMIX_SIZE=4"}},
		},
		{
			name: "pmix with COURIER_SIZE",
			env:  map[string]string{"PMIX_RANK": "1", "COURIER_SIZE": "2", "PMIX_NAMESPACE": "ns"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "pmix", JobID: "ns",
				Vars: []string{"PMIX_RANK=1", "COURIER_SIZE=2"}},
		},
		{
			name: "pmix without size defers to slurm",
			env: map[string]string{"PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.77.0",
				"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "slurm", JobID: "77.0",
				Vars: []string{"SLURM_PROCID=1", "SLURM_NTASKS=2"}},
		},
		{
			name: "mpich",
			env: map[string]string{"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0",
				"MPI_LOCALNRANKS": "2", "PMI_KVSNAME": "kvs_1234_0", "PMI_JOBID": "ignored"},
			want: Job{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Launcher: "mpich", JobID: "kvs_1234_0",
				Vars: []string{"PMI_RANK=2", "PMI_SIZE=4"}},
		},
		{
			name: "mpich with PMI_JOBID",
			env:  map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", "PMI_JOBID": "job9"},
			want: Job{Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Launcher: "mpich", JobID: "job9",
				Vars: []string{"PMI_RANK=0", "PMI_SIZE=1"}},
		},
		{
			name: "slurm",
			env: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
				"SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"},
			want: Job{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Launcher: "slurm", JobID: "4242.3",
				Vars: []string{"SLURM_PROCID=5", "SLURM_NTASKS=8"}},
		},
		{
			name: "slurm with SLURM_NPROCS and uneven nodes",
			env: map[string]string{"SLURM_PROCID": "2", "SLURM_NPROCS": "7", "SLURM_LOCALID": "2",
				"SLURM_NTASKS_PER_NODE": "3(x2),1", "SLURM_JOB_ID": "4242"},
			want: Job{Rank: 2, Size: 7, LocalRank: 2, LocalSize: -1, Launcher: "slurm", JobID: "4242",
				Vars: []string{"SLURM_PROCID=2", "SLURM_NPROCS=7"}},
		},
		{
			name: "slurm step over uneven nodes",
			env: map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_NODEID": "2",
				"SLURM_NTASKS_PER_NODE": "3(x2),1", "SLURM_STEP_TASKS_PER_NODE": "3(x2),1", "SLURM_JOB_ID": "4242"},
			want: Job{Rank: 6, Size: 7, LocalRank: 0, LocalSize: 1, Launcher: "slurm", JobID: "4242",
				Vars: []string{"SLURM_PROCID=6", "SLURM_NTASKS=7"}},
		},
		{
			name: "slurm step on one node",
			env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_LOCALID": "1",
				"SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"},
			want: Job{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Launcher: "slurm", JobID: "4242.0",
				Vars: []string{"SLURM_PROCID=1", "SLURM_NTASKS=3"}},
		},
		{
			name: "empty values are unset",
			env:  map[string]string{"COURIER_RANK": "", "OMPI_COMM_WORLD_RANK": "", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
			want: Job{Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Launcher: "slurm",
				Vars: []string{"SLURM_PROCID=0", "SLURM_NTASKS=1"}},
		},
		{
			name: "torchrun",
			env: map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
				"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"},
			want: Job{Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2, Launcher: "torchrun", JobID: "none@node0:29500#0",
				Vars: []string{"RANK=3", "WORLD_SIZE=4", "MASTER_ADDR=node0", "MASTER_PORT=29500"}},
		},
		{
			name: "torch env:// without torchrun",
			env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
			want: Job{Rank: 0, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "torchrun", JobID: "env@10.0.0.1:1234",
				Vars: []string{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234"}},
		},
		{
			name: "RANK alone is not torchrun",
			env:  map[string]string{"RANK": "1", "WORLD_SIZE": "2"},
			want: Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "single"},
		},
		{
			name: "flux on one node",
			env: map[string]string{"FLUX_TASK_RANK": "2", "FLUX_JOB_SIZE": "3", "FLUX_TASK_LOCAL_ID": "2",
				"FLUX_JOB_NNODES": "1", "FLUX_JOB_ID": "f2Xq"},
			want: Job{Rank: 2, Size: 3, LocalRank: 2, LocalSize: 3, Launcher: "flux", JobID: "f2Xq",
				Vars: []string{"FLUX_TASK_RANK=2", "FLUX_JOB_SIZE=3"}},
		},
		{
			name: "flux on several nodes",
			env: map[string]string{"FLUX_TASK_RANK": "2", "FLUX_JOB_SIZE": "4", "FLUX_TASK_LOCAL_ID": "0",
				"FLUX_JOB_NNODES": "2", "FLUX_JOB_ID": "f2Xq"},
			want: Job{Rank: 2, Size: 4, LocalRank: 0, LocalSize: -1, Launcher: "flux", JobID: "f2Xq",
				Vars: []string{"FLUX_TASK_RANK=2", "FLUX_JOB_SIZE=4"}},
		},
		{
			name: "jsrun",
			env: map[string]string{"JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_SIZE": "2", "JSM_NAMESPACE_LOCAL_RANK": "1",
				"JSM_NAMESPACE_LOCAL_SIZE": "2", "LSB_JOBID": "4242"},
			want: Job{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "jsrun", JobID: "4242",
				Vars: []string{"JSM_NAMESPACE_RANK=1", "JSM_NAMESPACE_SIZE=2"}},
		},
		// Precedence: each launcher wins over those below it.
		{
			name: "courier over openmpi",
			env: map[string]string{"COURIER_RANK": "1", "COURIER_SIZE": "2",
				"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "manual",
				Vars: []string{"COURIER_RANK=1", "COURIER_SIZE=2"}},
		},
		{
			name: "torchrun over the slurm and openmpi of its agent",
			env: map[string]string{"RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "j",
				"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
			want: Job{Rank: 1, Size: 8, LocalRank: -1, LocalSize: -1, Launcher: "torchrun", JobID: "j",
				Vars: []string{"RANK=1", "WORLD_SIZE=8"}},
		},
		{
			name: "flux over its pmi and slurm",
			env: map[string]string{"FLUX_TASK_RANK": "1", "FLUX_JOB_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2",
				"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "flux",
				Vars: []string{"FLUX_TASK_RANK=1", "FLUX_JOB_SIZE=2"}},
		},
		{
			name: "openmpi over pmix, mpich and slurm",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
				"PMIX_RANK": "3", "PMIX_SIZE": "4", "PMI_RANK": "0", "PMI_SIZE": "1",
				"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
			want: Job{Rank: 3, Size: 4, LocalRank: -1, LocalSize: -1, Launcher: "openmpi",
				Vars: []string{"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4"}},
		},
		{
			name: "pmix over mpich and slurm",
			env: map[string]string{"PMIX_RANK": "1", "PMIX_SIZE": "2", "PMI_RANK": "0", "PMI_SIZE": "1",
				"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "pmix",
				Vars: []string{"PMIX_RANK=1", "PMIX_SIZE=2"}},
		},
		{
			name: "mpich over slurm",
			env: map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2",
				"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "9"},
			want: Job{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Launcher: "mpich",
				Vars: []string{"PMI_RANK=1", "PMI_SIZE=2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(env(tt.env))
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			got.Key, got.Addr = "", ""
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FromEnv =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the message
	}{
		{"COURIER_RANK without COURIER_SIZE", map[string]string{"COURIER_RANK": "1"},
			[]string{"COURIER_RANK=1 is set but COURIER_SIZE is not"}},
		{"COURIER_SIZE without COURIER_RANK", map[string]string{"COURIER_SIZE": "4"},
			[]string{"COURIER_SIZE=4 is set but COURIER_RANK is not"}},
		{"non-integer rank", map[string]string{"COURIER_RANK": "one", "COURIER_SIZE": "4"},
			[]string{`COURIER_RANK="one" is not an integer`}},
		{"non-integer size", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4.0"},
			[]string{`OMPI_COMM_WORLD_SIZE="4.0" is not an integer`}},
		{"overflowing size", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "99999999999999999999999"},
			[]string{`PMI_SIZE="99999999999999999999999" is not an integer`}},
		{"negative rank", map[string]string{"PMI_RANK": "-1", "PMI_SIZE": "4"},
			[]string{"PMI_RANK=-1 is negative"}},
		{"zero size", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "0"},
			[]string{"SLURM_NTASKS=0", "at least 1"}},
		{"rank not below size", map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"},
			[]string{"OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4"}},
		{"openmpi rank without size", map[string]string{"OMPI_COMM_WORLD_RANK": "1"},
			[]string{"OMPI_COMM_WORLD_RANK=1 is set but OMPI_COMM_WORLD_SIZE is not"}},
		{"mpich size without rank", map[string]string{"PMI_SIZE": "2"},
			[]string{"PMI_SIZE=2 is set but PMI_RANK is not"}},
		{"slurm without size", map[string]string{"SLURM_PROCID": "0"},
			[]string{"SLURM_PROCID=0 is set but SLURM_NTASKS is not"}},
		{"pmix without any size", map[string]string{"PMIX_RANK": "2", "PMIX_NAMESPACE": "ns"},
			[]string{"PMIX_RANK=2", "size is unknown", "-tags mpi", "COURIER_SIZE"}},
		{"local rank not below local size", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			[]string{"local rank 2 is not below local size 2", "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2"}},
		{"default local rank not below local size", map[string]string{"COURIER_RANK": "3", "COURIER_SIZE": "4",
			"COURIER_JOB_KEY": "k", "COURIER_LOCAL_SIZE": "2"},
			[]string{"local rank 3 is not below local size 2", "COURIER_LOCAL_RANK unset", "COURIER_LOCAL_SIZE=2"}},
		{"slurm local rank not below tasks per node", map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "4",
			"SLURM_LOCALID": "3", "SLURM_NTASKS_PER_NODE": "2"},
			[]string{"local rank 3 is not below local size 2"}},
		{"slurm local rank not below the step's tasks on this node", map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "4",
			"SLURM_LOCALID": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1"},
			[]string{"local rank 2 is not below this node's task count 2", "SLURM_LOCALID=2",
				"SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLURM_NODEID=1"}},
		{"non-integer local rank", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "x"},
			[]string{`MPI_LOCALRANKID="x" is not an integer`}},
		{"negative local rank", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "-1"},
			[]string{"SLURM_LOCALID=-1 is negative"}},
		{"zero local size", map[string]string{"COURIER_RANK": "1", "COURIER_SIZE": "2", "COURIER_LOCAL_SIZE": "0"},
			[]string{"COURIER_LOCAL_SIZE=0", "at least 1"}},
		{"torchrun without WORLD_SIZE", map[string]string{"RANK": "1", "TORCHELASTIC_RUN_ID": "j"},
			[]string{"RANK=1 is set but WORLD_SIZE is not"}},
		{"torchrun rank not below size", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			[]string{"RANK=2 is not below WORLD_SIZE=2"}},
		{"torchrun port not a number", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"},
			[]string{`MASTER_PORT="http" is not a port`, "COURIER_ADDR"}},
		{"torchrun port at the top", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "65535"},
			[]string{`MASTER_PORT="65535"`, "next one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, err := FromEnv(env(tt.env))
			if err == nil {
				t.Fatalf("FromEnv = %+v, want an error", job)
			}
			if !errors.Is(err, ErrBadEnv) {
				t.Errorf("error %q does not wrap ErrBadEnv", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestFromEnvAddrAndKey checks COURIER_ADDR and COURIER_JOB_KEY under every
// launcher, and the derived key.
func TestFromEnvAddrAndKey(t *testing.T) {
	launchers := map[string]map[string]string{
		"manual":  {"COURIER_RANK": "0", "COURIER_SIZE": "2"},
		"openmpi": {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_ess_base_jobid": "17"},
		"pmix":    {"PMIX_RANK": "0", "PMIX_SIZE": "2", "PMIX_NAMESPACE": "17"},
		"mpich":   {"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_KVSNAME": "17"},
		"slurm":   {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "17"},
		"torchrun": {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
			"TORCHELASTIC_RUN_ID": "17"},
		"flux":   {"FLUX_TASK_RANK": "0", "FLUX_JOB_SIZE": "2", "FLUX_JOB_ID": "17"},
		"jsrun":  {"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "2", "LSB_JOBID": "17"},
		"single": {},
	}
	keys := map[string]string{}
	for name, vars := range launchers {
		t.Run(name, func(t *testing.T) {
			with := map[string]string{"COURIER_ADDR": "node1:4444", "COURIER_JOB_KEY": "s3cret"}
			for k, v := range vars {
				with[k] = v
			}
			job, err := FromEnv(env(with))
			if err != nil {
				t.Fatal(err)
			}
			if job.Addr != "node1:4444" || job.Key != "s3cret" {
				t.Errorf("Addr, Key = %q, %q; want node1:4444, s3cret", job.Addr, job.Key)
			}
			for _, v := range job.Vars {
				if strings.Contains(v, "s3cret") {
					t.Errorf("Vars %q shows the key", job.Vars)
				}
			}

			job, err = FromEnv(env(vars))
			if err != nil {
				t.Fatal(err)
			}
			if job.Key == "" {
				t.Fatal("no derived key")
			}
			if name != "manual" && job.Launcher != name {
				t.Errorf("Launcher = %q, want %q", job.Launcher, name)
			}
			keys[job.Launcher] = job.Key
		})
	}
	// One derived key per launcher, even where the job IDs are equal.
	seen := map[string]string{}
	for l, k := range keys {
		if other, dup := seen[k]; dup {
			t.Errorf("launchers %s and %s derive the same key", l, other)
		}
		seen[k] = l
	}

	// Ranks of one job agree; another job's ID gives another key.
	a0, _ := FromEnv(env(map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "17"}))
	a1, _ := FromEnv(env(map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "17"}))
	b0, _ := FromEnv(env(map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "18"}))
	if a0.Key != a1.Key {
		t.Errorf("ranks of one job derive keys %q and %q", a0.Key, a1.Key)
	}
	if a0.Key == b0.Key {
		t.Errorf("jobs 17 and 18 derive the same key %q", a0.Key)
	}
}

func TestTasksOnNode(t *testing.T) {
	for _, c := range []struct {
		list, node string
		want       int
	}{
		{"4", "", 4},
		{"4", "0", 4},
		{"4", "1", 0},    // no node 1
		{"2(x3)", "", 2}, // every node has 2
		{"2(x3)", "0", 2},
		{"2(x3)", "2", 2},
		{"2(x3)", "3", 0},
		{"3(x2),1", "1", 3},
		{"3(x2),1", "2", 1},
		{"1,2,3", "1", 2},
		{"1,2,3", "", 0},
		{"", "0", 0},
		{"2(x)", "0", 0},
		{"2(3)", "0", 0},
		{"x", "0", 0},
		{"0", "0", 0},
		{"2(x0)", "0", 0},
		{"4", "-1", 0},
		{"4", "one", 0},
	} {
		if got := tasksOnNode(c.list, c.node); got != c.want {
			t.Errorf("tasksOnNode(%q, %q) = %d, want %d", c.list, c.node, got, c.want)
		}
	}
}

// TestFromEnvTorchrunAddr: under torchrun, rank 0's rendezvous is on
// MASTER_ADDR, one port above MASTER_PORT (the agent's store holds
// MASTER_PORT), unless COURIER_ADDR names another; a restarted attempt
// is another job.
func TestFromEnvTorchrunAddr(t *testing.T) {
	vars := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "::1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}
	job, err := FromEnv(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if job.Addr != "[::1]:29501" {
		t.Errorf("Addr = %q, want [::1]:29501", job.Addr)
	}
	vars["TORCHELASTIC_RESTART_COUNT"] = "1"
	restarted, err := FromEnv(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if restarted.Key == job.Key {
		t.Errorf("a restarted attempt derives the same key %q", job.Key)
	}
	vars["COURIER_ADDR"] = "node7:4000"
	vars["MASTER_PORT"] = "not checked when COURIER_ADDR is set"
	job, err = FromEnv(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if job.Addr != "node7:4000" {
		t.Errorf("with COURIER_ADDR: Addr = %q, want node7:4000", job.Addr)
	}
}
