package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/nccl"
	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/cuda"
	_ "github.com/courier-mp/courier/mp" // registers the backends
)

const infoUsage = `usage: courier info

Prints what this machine offers courier: the launcher this process sees (and
its rank), the backends and whether each can run here (with the reason when
it cannot), the backend COURIER_BACKEND picks, the CUDA driver and GPUs, and
NCCL's version. Run it under the launcher (mpirun -np 2 courier info) to see
what each rank sees. It changes nothing, and exits 0 whatever it finds.
`

// info is courier info.
func (a *app) info(args []string) int {
	if len(args) > 0 {
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
	}
	if v, path, err := nccl.Version(); err != nil {
		fmt.Fprintln(w, labeled("nccl", err))
	} else {
		fmt.Fprintf(w, "nccl: %s (%s)\n", v, path)
	}
	return 0
}

// labeled prints err after label, without repeating the label when the
// error starts with it.
func labeled(label string, err error) string {
	return label + ": " + strings.TrimPrefix(err.Error(), label+": ")
}
