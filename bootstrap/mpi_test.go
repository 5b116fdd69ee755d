//go:build mpi && unix

package bootstrap

// These tests run in a binary built with -tags mpi. Started by mpirun, they
// check the job MPI gives; started alone, MPI's singleton. Run them both
// ways:
//
//	go test -tags mpi -run MPI ./bootstrap/
//	go test -c -tags mpi -o /tmp/bt ./bootstrap/ &&
//	  mpirun --allow-run-as-root --oversubscribe -np 4 /tmp/bt -test.run MPI -test.v
//
// TestMPIFinalize ends MPI, so it comes last and a run that uses MPI must
// include it (mpirun reports a rank that exits without MPI_Finalize).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emer/empi/mpi"
)

// mpiChildVar marks the copy of the test binary that
// TestMPIAloneWithLauncherEnv starts.
const mpiChildVar = "COURIER_TEST_MPI_CHILD"

// underMPIRun reports whether mpirun started this test binary.
func underMPIRun() bool {
	return os.Getenv("OMPI_COMM_WORLD_SIZE") != "" && os.Getenv(mpiChildVar) == ""
}

// mpiDetect is Detect for the tests: started alone, the launcher's
// variables are blanked first, so that only MPI's singleton decides.
func mpiDetect(t *testing.T) Job {
	t.Helper()
	if os.Getenv(mpiChildVar) != "" {
		t.Skip("the child of TestMPIAloneWithLauncherEnv runs that test only")
	}
	if !underMPIRun() {
		setEnv(t, nil)
	}
	job, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	return job
}

func envInt(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		t.Fatalf("%s=%q: %v", name, os.Getenv(name), err)
	}
	return n
}

func TestMPIDetect(t *testing.T) {
	start := time.Now()
	job := mpiDetect(t)
	t.Logf("Detect (MPI set-up included) took %v: %+v; MPI library %q", time.Since(start), job, mpiProc.library)
	if job.Launcher != "mpi" || job.Key == "" || job.Listener != nil {
		t.Errorf("Detect = %+v, want Launcher \"mpi\", a Key, no Listener", job)
	}
	want := Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1}
	if underMPIRun() {
		want = Job{Rank: envInt(t, "OMPI_COMM_WORLD_RANK"), Size: envInt(t, "OMPI_COMM_WORLD_SIZE"),
			LocalRank: envInt(t, "OMPI_COMM_WORLD_LOCAL_RANK"), LocalSize: envInt(t, "OMPI_COMM_WORLD_LOCAL_SIZE")}
		env, err := FromEnv(os.Getenv)
		if err != nil || job.JobID != env.JobID || job.Key != env.Key || strings.Join(job.Vars, " ") != strings.Join(env.Vars, " ") {
			t.Errorf("JobID %q, Key %q, Vars %q: want the environment's (%+v, %v)", job.JobID, job.Key, job.Vars, env, err)
		}
	}
	if job.Rank != want.Rank || job.Size != want.Size || job.LocalRank != want.LocalRank || job.LocalSize != want.LocalSize {
		t.Errorf("Detect = rank %d of %d, local %d of %d; want rank %d of %d, local %d of %d",
			job.Rank, job.Size, job.LocalRank, job.LocalSize, want.Rank, want.Size, want.LocalRank, want.LocalSize)
	}
	if !mpiProc.owned {
		t.Error("courier did not initialise MPI itself")
	}

	// Once per process: a second Detect finds MPI set up.
	again, err := Detect()
	if err != nil || again.Rank != job.Rank || again.Size != job.Size || again.Key != job.Key {
		t.Errorf("second Detect = %+v, %v; want %+v", again, err, job)
	}

	// courier run, or a launch by hand, keeps courier's own rendezvous.
	t.Setenv("COURIER_RANK", "0")
	t.Setenv("COURIER_SIZE", "1")
	if job, err := Detect(); err != nil || job.Launcher != "manual" {
		t.Errorf("Detect with COURIER_RANK/SIZE = %+v, %v; want Launcher \"manual\"", job, err)
	}
}

func TestMPIAllGather(t *testing.T) {
	job := mpiDetect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := Connect(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if _, ok := ex.(interface{ Finalize() error }); !ok {
		t.Errorf("the MPI Exchanger %T has no Finalize method", ex)
	}
	rank, size := job.Rank, job.Size

	blob := func(r, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r*7 + i)
		}
		return b
	}
	check := func(name string, lengths func(r int) int) {
		t.Helper()
		got, err := ex.AllGather(ctx, blob(rank, lengths(rank)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != size {
			t.Fatalf("%s: %d blobs, want %d", name, len(got), size)
		}
		for r, b := range got {
			if want := blob(r, lengths(r)); b == nil || !bytes.Equal(b, want) {
				t.Errorf("%s: rank %d's blob is %d bytes %.8x…, want %d bytes %.8x…", name, r, len(b), b, len(want), want)
			}
		}
		if size > 1 && len(got[0]) > 0 {
			got[0] = append(got[0], 1) // must not run into rank 1's blob
			if want := blob(1, lengths(1)); !bytes.Equal(got[1], want) {
				t.Errorf("%s: appending to rank 0's blob changed rank 1's", name)
			}
		}
	}
	check("lengths that differ, rank 0's empty", func(r int) int { return r * 37 % 101 })
	check("all empty", func(int) int { return 0 })
	check("the same length", func(int) int { return 128 })
	check("MaxBlob from the last rank", func(r int) int {
		if r == size-1 {
			return MaxBlob
		}
		return r
	})
	for i := range 50 {
		check(fmt.Sprintf("round %d", i), func(r int) int { return (r + i) % 5 })
	}

	// Courier's MPI calls may come from any OS thread.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		check("from a goroutine locked to another thread", func(r int) int { return 3 })
	}()
	<-done

	// Refused before MPI is asked: every rank refuses alike.
	if _, err := ex.AllGather(ctx, make([]byte, MaxBlob+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("AllGather of MaxBlob+1 bytes: %v, want ErrTooLarge", err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := ex.AllGather(cancelled, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("AllGather with a cancelled context: %v, want context.Canceled", err)
	}

	// Close leaves MPI running: a second Exchanger works.
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.AllGather(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("AllGather after Close: %v, want ErrClosed", err)
	}
	ex2, err := Connect(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer ex2.Close()
	ex = ex2
	check("on a second Exchanger", func(r int) int { return r + 1 })

	// A Job MPI did not give is refused.
	bad := job
	bad.Size++
	if ex, err := Connect(ctx, bad); err == nil {
		ex.Close()
		t.Errorf("Connect with rank %d of %d (MPI says %d) succeeded", bad.Rank, bad.Size, size)
	}
}

// TestMPIErrorsReturn checks that MPI errors on courier's communicator
// come back as Go errors instead of aborting the process.
func TestMPIErrorsReturn(t *testing.T) {
	job := mpiDetect(t)
	logged := mpi.LogErrors
	mpi.LogErrors = false // empi logs every error it returns unless told not to
	defer func() { mpi.LogErrors = logged }()
	buf := []byte{1}
	err := mpiProc.comm.BcastU8(job.Size, buf) // no such root: MPI_ERR_ROOT
	if err == nil {
		t.Fatal("MPI_Bcast from a root outside the communicator succeeded")
	}
	t.Logf("MPI error, returned: %v", err)
}

// TestMPIAloneWithLauncherEnv starts this test binary alone, with Open MPI's
// variables in its environment but no mpirun, as a user might by hand: MPI
// then sees one rank while the environment says 4, which must be a clear
// error, never a lone rank 0 of 1.
func TestMPIAloneWithLauncherEnv(t *testing.T) {
	if os.Getenv(mpiChildVar) == "alone" {
		defer Finalize()
		job, err := Detect()
		if err == nil {
			t.Fatalf("Detect = %+v, want an error", job)
		}
		fmt.Printf("Detect error: %v\n", err)
		if !errors.Is(err, ErrBadEnv) {
			t.Errorf("error does not wrap ErrBadEnv")
		}
		for _, s := range []string{"OMPI_COMM_WORLD_SIZE=4", "one of 4 ranks", "MPI sees it alone", "-tags mpi", "Open MPI"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error does not say %q", s)
			}
		}
		return
	}
	if underMPIRun() && os.Getenv("OMPI_COMM_WORLD_RANK") != "0" {
		t.Skip("rank 0 runs it")
	}
	for _, vars := range [][]string{
		{"OMPI_COMM_WORLD_SIZE=4"},
		{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMPIAloneWithLauncherEnv$", "-test.v", "-test.count=1")
		cmd.Env = append(append(aloneEnv(), mpiChildVar+"=alone"), vars...)
		out, err := cmd.CombinedOutput()
		t.Logf("started alone with %s:\n%s", strings.Join(vars, " "), out)
		if err != nil {
			t.Errorf("the child failed: %v", err)
		}
		if !strings.Contains(string(out), "Detect error: ") {
			t.Errorf("the child did not report Detect's error")
		}
	}
}

// TestMPIProgramOwnsMPI starts this test binary alone, as a program that
// initialises MPI itself (through empi) before courier: courier then uses
// that MPI, and its Finalize leaves MPI to the program.
func TestMPIProgramOwnsMPI(t *testing.T) {
	if os.Getenv(mpiChildVar) == "owner" {
		mpi.Init()
		job, err := Detect()
		if err != nil {
			t.Fatal(err)
		}
		if job.Launcher != "mpi" || job.Size != 1 || mpiProc.owned {
			t.Errorf("Detect = %+v, owned %v; want the program's MPI, not courier's", job, mpiProc.owned)
		}
		ex, err := Connect(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close()
		if err := Finalize(); err != nil {
			t.Errorf("Finalize: %v", err)
		}
		if _, err := ex.AllGather(context.Background(), []byte("x")); err != nil {
			t.Errorf("AllGather after courier's Finalize, with the program's MPI still running: %v", err)
		}
		if err := mpiProc.comm.Barrier(); err != nil {
			t.Errorf("MPI after courier's Finalize: %v", err)
		}
		mpi.Finalize() // the program's to do
		if _, err := ex.AllGather(context.Background(), []byte("x")); !errors.Is(err, errMPIFinalized) {
			t.Errorf("AllGather after the program finalised MPI: %v, want errMPIFinalized", err)
		}
		if err := Finalize(); err != nil {
			t.Errorf("Finalize after the program's: %v", err)
		}
		fmt.Println("program-owned MPI: ok")
		return
	}
	if os.Getenv(mpiChildVar) != "" || underMPIRun() && os.Getenv("OMPI_COMM_WORLD_RANK") != "0" {
		t.Skip("rank 0 runs it")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMPIProgramOwnsMPI$", "-test.v", "-test.count=1")
	cmd.Env = append(aloneEnv(), mpiChildVar+"=owner")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "program-owned MPI: ok") {
		t.Errorf("the child failed: %v\n%s", err, out)
	}
}

// aloneEnv is this process's environment without what a launcher or MPI
// put there: a process started with it is not a rank of this job.
func aloneEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, p := range []string{"OMPI_", "PMIX_", "PMI_", "OPAL_", "ORTE_", "HYDRA_", "MPI_LOCAL", "SLURM_", "COURIER_"} {
			drop = drop || strings.HasPrefix(name, p)
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}

// TestMPIAllGatherAbandoned lets rank 0's context end while the other
// ranks are late to an all-gather: rank 0 returns at once, MPI finishes the
// collective in the background when they come, and until then Finalize
// refuses to run.
func TestMPIAllGatherAbandoned(t *testing.T) {
	job := mpiDetect(t)
	if job.Size < 2 {
		t.Skip("needs several ranks: run under mpirun")
	}
	ex, err := Connect(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if _, err := ex.AllGather(context.Background(), nil); err != nil { // all ranks start together
		t.Fatal(err)
	}
	if job.Rank != 0 {
		time.Sleep(time.Second)
		if _, err := ex.AllGather(context.Background(), []byte("late")); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ex.AllGather(ctx, []byte("early")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllGather whose context ends first: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("AllGather returned %v after its context ended", d)
	}
	if _, err := ex.AllGather(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "abandoned") {
		t.Errorf("AllGather after an abandoned one: %v, want an error saying so", err)
	}
	err = Finalize()
	t.Logf("Finalize while MPI still runs the abandoned all-gather: %v", err)
	if err == nil || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("Finalize while an all-gather is abandoned: %v, want an error saying so", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mpiProc.mu.Lock()
		stuck := mpiProc.abandoned
		mpiProc.mu.Unlock()
		if stuck == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned all-gather never finished")
		}
	}
}

// TestMPIFinalize ends MPI, once and for good; it must be the last test
// that uses MPI.
func TestMPIFinalize(t *testing.T) {
	job := mpiDetect(t)
	ex, err := Connect(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if err := Finalize(); err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	if err := Finalize(); err != nil {
		t.Errorf("second Finalize: %v", err)
	}
	if err := ex.(interface{ Finalize() error }).Finalize(); err != nil {
		t.Errorf("the Exchanger's Finalize: %v", err)
	}
	if _, err := ex.AllGather(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) || !errors.Is(err, errMPIFinalized) {
		t.Errorf("AllGather after Finalize: %v, want ErrClosed and errMPIFinalized", err)
	}
	if job, err := Detect(); !errors.Is(err, errMPIFinalized) {
		t.Errorf("Detect after Finalize = %+v, %v; want errMPIFinalized", job, err)
	}
	if ex, err := Connect(context.Background(), job); !errors.Is(err, errMPIFinalized) {
		if ex != nil {
			ex.Close()
		}
		t.Errorf("Connect after Finalize: %v, want errMPIFinalized", err)
	}
}
