package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/nccl"
	"github.com/courier-mp/courier/backend/shm"
	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/cuda"
	shmem "github.com/courier-mp/courier/internal/shm"
	"github.com/courier-mp/courier/mp" // also registers the backends
)

const infoUsage = `usage: courier info [-peers]

Prints what this machine offers courier: the launcher this process sees (and
its rank), the backends and whether each can run here (with the reason when
it cannot), the backend COURIER_BACKEND picks, whether ranks of this host can
meet through shared memory (and copy large messages once), the CUDA driver
and GPUs, NCCL's version, and, for the ranks of this host (the launcher's
local ranks, else one per GPU and at least two), which GPU each takes and
the path the nccl backend gives each pair: cuda-ipc for two ranks on one
GPU, nccl for two GPUs, refused where COURIER_CUDA_IPC=0 would leave two
ranks on one GPU (ranks of other hosts always meet through nccl). Run it
under the launcher (mpirun -np 2 courier info) to see what each rank
sees. It changes nothing, and exits 0 whatever it finds.

With -peers, under a launcher, it also joins the job (mp.Init, with
COURIER_BACKEND as set) and prints the transport this rank would use to
reach each rank: self, shm (shared memory) or tcp on the host backend, the
backend's name elsewhere. It exits 1 if it cannot join.
`

// info is courier info.
func (a *app) info(args []string) int {
	peers := false
	switch {
	case len(args) == 1 && (args[0] == "-peers" || args[0] == "--peers"):
		peers = true
	case len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		io.WriteString(a.stdout, infoUsage)
		return 0
	case len(args) > 0:
		io.WriteString(a.stderr, infoUsage)
		return 2
	}
	w := a.stdout
	fmt.Fprintf(w, "courier %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)

	job, err := bootstrap.FromEnv(os.Getenv)
	switch {
	case err != nil:
		fmt.Fprintf(w, "launcher: %v\n", err)
	case job.Launcher == "single":
		fmt.Fprintln(w, "launcher: none (a single process)")
	default:
		fmt.Fprintf(w, "launcher: %s, rank %d of %d", job.Launcher, job.Rank, job.Size)
		if job.LocalRank >= 0 {
			fmt.Fprintf(w, ", local rank %d of %d", job.LocalRank, job.LocalSize)
		}
		fmt.Fprintln(w)
	}

	chosen := strings.TrimSpace(os.Getenv("COURIER_BACKEND"))
	available := map[string]bool{}
	for _, name := range backend.Drivers() {
		d, _ := backend.Lookup(name)
		status := "available"
		if av, ok := d.(backend.Availability); ok {
			if err := av.Available(); err != nil {
				status = "not available: " + err.Error()
			}
		}
		available[name] = status == "available"
		fmt.Fprintf(w, "backend %s: %s\n", name, status)
	}
	if chosen == "" || chosen == "auto" {
		pick := "no backend can run here"
		for _, name := range []string{"nccl", "host"} { // auto's order
			if available[name] {
				pick = name
				break
			}
		}
		fmt.Fprintf(w, "COURIER_BACKEND=%q picks %s\n", chosen, pick)
	} else {
		fmt.Fprintf(w, "COURIER_BACKEND=%q\n", chosen)
	}

	fmt.Fprintln(w, shmInfo())

	if v, err := cuda.DriverVersion(); err != nil {
		fmt.Fprintln(w, labeled("cuda", err))
	} else {
		n, err := cuda.DeviceCount()
		if err != nil {
			fmt.Fprintf(w, "cuda: driver %d.%d: %v\n", v/1000, v%1000/10, err)
		} else {
			fmt.Fprintf(w, "cuda: driver %d.%d, %d GPU(s)\n", v/1000, v%1000/10, n)
		}
		for i := range n {
			d := cuda.Device(i)
			name, _ := d.Name()
			mem, _ := d.TotalMemory()
			major, minor, _ := d.ComputeCapability()
			bus, _ := d.PCIBusID()
			fmt.Fprintf(w, "  %v: %s, %.1f GiB, compute %d.%d, %s\n", d, name, float64(mem)/(1<<30), major, minor, bus)
		}
		if n > 0 {
			local := -1
			if err == nil && job.LocalSize > 1 {
				local = job.LocalSize
			}
			io.WriteString(w, gpuPairs(n, local, os.Getenv))
		}
	}
	if v, path, err := nccl.Version(); err != nil {
		fmt.Fprintln(w, labeled("nccl", err))
	} else {
		fmt.Fprintf(w, "nccl: %s (%s)\n", v, path)
	}
	if peers {
		return a.infoPeers(w)
	}
	return 0
}

// maxPairs bounds the pairs gpuPairs lists.
const maxPairs = 28

// gpuPairs says, for localSize ranks on a host of n GPUs (-1: one per GPU
// and at least two), which GPU each rank takes (backend.PickDevice) and
// which path the nccl backend gives each pair, and why.
func gpuPairs(n, localSize int, getenv func(string) string) string {
	var b strings.Builder
	what := "the launcher's local ranks"
	if localSize < 0 {
		localSize, what = max(n, 2), "a job of one rank per GPU (at least two); run under the launcher for its own"
	}
	devs := make([]int, localSize)
	for lr := range devs {
		d, err := backend.PickDevice(backend.Config{Job: backend.Job{Rank: lr, LocalRank: lr, Size: localSize}, Env: getenv}, n)
		if err != nil {
			fmt.Fprintf(&b, "gpu pairs: %v\n", err)
			return b.String()
		}
		devs[lr] = d
	}
	ipcOff := strings.TrimSpace(getenv(nccl.IPCEnv)) == "0"
	fmt.Fprintf(&b, "gpu pairs: %d ranks on this host (%s): GPUs %v by local rank\n", localSize, what, devs)
	listed := 0
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			if listed == maxPairs {
				fmt.Fprintf(&b, "  … and %d pairs more\n", localSize*(localSize-1)/2-maxPairs)
				return b.String()
			}
			listed++
			var path string
			switch {
			case devs[i] != devs[j]:
				path = fmt.Sprintf("nccl (GPUs %d and %d)", devs[i], devs[j])
			case ipcOff:
				path = fmt.Sprintf("refused (both on GPU %d, and %s=0 turns off the CUDA IPC path)", devs[i], nccl.IPCEnv)
			default:
				path = fmt.Sprintf("cuda-ipc (both on GPU %d)", devs[i])
			}
			fmt.Fprintf(&b, "  local ranks %d and %d: %s\n", i, j, path)
		}
	}
	return b.String()
}

// shmInfo says whether ranks of this host can meet through shared memory,
// and whether large messages can go in one copy.
func shmInfo() string {
	id, err := shmem.HostID()
	if err != nil {
		return labeled("shm", err)
	}
	single := "single copy (process_vm_readv) allowed"
	if err := shmem.CanReadFrom(os.Getpid(), shmem.ProbeAddr()); err != nil {
		single = "single copy refused, two copies through the ring: " + err.Error()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		single += " (ptrace_scope " + strings.TrimSpace(string(b)) + ")"
	}
	return fmt.Sprintf("shm: ranks of this host share memory (host %.12s…); %s; %s; %s", id, single, splitInfo(os.Getenv), copyInInfo(os.Getenv))
}

// splitInfo says whether a pull of a user's large message is split with
// its sender here (shm.SplitEnv).
func splitInfo(getenv func(string) string) string {
	on, err := shm.ParseSplit(getenv(shm.SplitEnv))
	switch {
	case err != nil:
		return err.Error()
	case !on:
		return "a large message pulled by its receiver alone (" + shm.SplitEnv + "=0)"
	}
	return "a large message pulled by both ranks at once"
}

// copyInInfo says how a sender copies payloads into a ring here
// (shm.CopyInEnv), and whether this CPU has the non-temporal stores that
// the default uses.
func copyInInfo(getenv func(string) string) string {
	in, err := shm.ParseCopyIn(getenv(shm.CopyInEnv))
	if err != nil {
		return err.Error()
	}
	switch {
	case in == shm.CopyInCache && getenv(shm.CopyInEnv) == "":
		return "payloads copied into the rings through the cache (the default on Intel processors)"
	case in == shm.CopyInCache:
		return "payloads copied into the rings through the cache (" + shm.CopyInEnv + "=cache)"
	case shmem.CanStream():
		return "payloads from 4 KiB copied into the rings with non-temporal stores"
	}
	return "payloads copied into the rings through the cache (this CPU has no AVX2 for non-temporal stores)"
}

// infoPeers joins the job and prints the transport to each rank.
func (a *app) infoPeers(w io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := mp.Init(ctx)
	if err != nil {
		fmt.Fprintf(w, "peers: cannot join the job: %v\n", err)
		return 1
	}
	defer c.Close()
	var b strings.Builder
	for r := range c.Size() {
		fmt.Fprintf(&b, " %d:%s", r, c.Transport(r))
	}
	fmt.Fprintf(w, "peers: rank %d of %d on the %s backend reaches rank%s\n", c.Rank(), c.Size(), c.Backend(), b.String())
	// Every rank leaves together, so no rank closes while another still
	// connects.
	if err := mp.Barrier(c); err != nil {
		fmt.Fprintf(w, "peers: %v\n", err)
		return 1
	}
	return 0
}

// labeled prints err after label, without repeating the label when the
// error starts with it.
func labeled(label string, err error) string {
	return label + ": " + strings.TrimPrefix(err.Error(), label+": ")
}
