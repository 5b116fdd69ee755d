//go:build unix

package launch

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// helperArg, as the first argument of the test binary, makes it act as a
// rank (see helperMain) instead of running tests.
const helperArg = "__courier_launch_helper__"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == helperArg {
		os.Exit(helperMain(os.Args[2:]))
	}
	// Under -race, a process sleeps 1 s before exiting (GORACE
	// atexit_sleep_ms); the ranks the tests start need not.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(leakcheck.Check(m.Run()))
}

// helperCmd returns the Program and Args that make a rank run helper mode
// with its arguments.
func helperCmd(mode string, args ...string) (string, []string) {
	return os.Args[0], append([]string{helperArg, mode}, args...)
}

// helperMain is a rank. Modes:
//
//	check          verify the environment and the rendezvous, print many
//	               lines (split across writes) to stdout and stderr
//	fail R CODE    after a barrier, rank R exits CODE; the others sleep
//	kill R         after a barrier, rank R kills itself with SIGKILL
//	cascade R FILE rank R SIGKILLs itself (its output held open 0.3 s by
//	               a child); the others exit 3 as soon as it is dead
//	sleep          sleep for an hour
//	wait-int       after a barrier, print "ready", exit 0 on SIGINT
//	ignore-int     ignore SIGINT, barrier, print "ready", sleep
//	ignore-term R CODE  others ignore SIGTERM; after a barrier R exits CODE
func helperMain(args []string) int {
	rank, err1 := strconv.Atoi(os.Getenv(EnvRank))
	size, err2 := strconv.Atoi(os.Getenv(EnvSize))
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "bad rank/size: %v %v\n", err1, err2)
		return 90
	}
	arg := func(i int) int {
		v, err := strconv.Atoi(args[i])
		if err != nil {
			panic(err)
		}
		return v
	}
	switch args[0] {
	case "check":
		if err := checkEnv(rank, size); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
			return 91
		}
		if err := barrier(rank, size); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: barrier: %v\n", rank, err)
			return 92
		}
		fmt.Printf("rank %d of %d env ok\n", rank, size)
		pad := strings.Repeat("x", 100)
		for k := range linesPerRank {
			// Three writes per line, so the pipe splits lines anywhere.
			os.Stdout.WriteString(fmt.Sprintf("rank %d line %d ", rank, k))
			os.Stdout.WriteString(pad)
			os.Stdout.WriteString("\n")
		}
		for k := range 20 {
			fmt.Fprintf(os.Stderr, "rank %d stderr %d\n", rank, k)
		}
		fmt.Printf("rank %d end", rank) // no newline
		fmt.Fprintf(os.Stderr, "rank %d stderr end", rank)
		return 0
	case "fail", "kill":
		if err := barrier(rank, size); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: barrier: %v\n", rank, err)
			return 92
		}
		if rank == arg(1) {
			fmt.Fprintf(os.Stderr, "rank %d failing\n", rank)
			if args[0] == "kill" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return arg(2)
		}
		time.Sleep(time.Hour)
	case "cascade":
		// Rank R dies by SIGKILL while a process it started holds its
		// output open for a while; the others see it die and exit with
		// status 3 at once, so their ends are reaped first.
		if err := barrier(rank, size); err != nil {
			return 92
		}
		pidFile := args[2]
		if rank == arg(1) {
			hold := exec.Command("sleep", "0.3")
			hold.Stdout, hold.Stderr = os.Stdout, os.Stderr
			if err := hold.Start(); err != nil {
				return 93
			}
			os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
			os.Rename(pidFile+".tmp", pidFile)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				continue
			}
			st, err := os.ReadFile("/proc/" + string(b) + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				fmt.Fprintf(os.Stderr, "rank %d saw rank %d die\n", rank, arg(1))
				// The leader is a zombie before the killed process's
				// other threads have gone, and its pidfd reports the end
				// only then: leave it that long, as a rank that notices a
				// loss through its connections would.
				time.Sleep(100 * time.Millisecond)
				return 3
			}
		}
		return 94
	case "sleep":
		time.Sleep(time.Hour)
	case "wait-int":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt)
		if err := barrier(rank, size); err != nil {
			return 92
		}
		fmt.Println("ready")
		<-ch
		fmt.Printf("rank %d got interrupt\n", rank)
		return 0
	case "ignore-int":
		signal.Ignore(os.Interrupt)
		if err := barrier(rank, size); err != nil {
			return 92
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "ignore-term":
		if rank != arg(1) {
			signal.Ignore(syscall.SIGTERM)
		}
		if err := barrier(rank, size); err != nil {
			return 92
		}
		if rank == arg(1) {
			return arg(2)
		}
		time.Sleep(time.Hour)
	}
	return 99
}

const linesPerRank = 200

// checkEnv verifies what courier run promises a rank.
func checkEnv(rank, size int) error {
	if rank < 0 || rank >= size {
		return fmt.Errorf("rank %d of %d", rank, size)
	}
	if g := os.Getenv(EnvLocalRank); g != strconv.Itoa(rank) {
		return fmt.Errorf("%s=%q", EnvLocalRank, g)
	}
	if g := os.Getenv(EnvLocalSize); g != strconv.Itoa(size) {
		return fmt.Errorf("%s=%q", EnvLocalSize, g)
	}
	if k := os.Getenv(EnvJobKey); !hexKey.MatchString(k) {
		return fmt.Errorf("%s=%q is not 32 hex digits", EnvJobKey, k)
	}
	for _, v := range []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"} {
		if g, ok := os.LookupEnv(v); ok {
			return fmt.Errorf("inherited %s=%s", v, g)
		}
	}
	if g := os.Getenv("COURIER_TEST_KEEP"); g != "kept" {
		return fmt.Errorf("COURIER_TEST_KEEP=%q, want kept", g)
	}
	return nil
}

// barrier checks the rendezvous socket and holds every rank until all have
// arrived: rank 0 takes fd 3 as a listener, checks that it listens at
// COURIER_ADDR, accepts a connection from each other rank carrying its rank
// and job key, checks the keys are its own, and answers "go" to each.
func barrier(rank, size int) error {
	addr, key := os.Getenv(EnvAddr), os.Getenv(EnvJobKey)
	deadline := time.Now().Add(10 * time.Second)
	if rank != 0 {
		if v, ok := os.LookupEnv(EnvRendezvousFD); ok {
			return fmt.Errorf("%s=%s set on rank %d", EnvRendezvousFD, v, rank)
		}
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		fmt.Fprintf(c, "%d %s\n", rank, key)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "go\n" {
			return fmt.Errorf("answer %q, %v", line, err)
		}
		return nil
	}
	if v := os.Getenv(EnvRendezvousFD); v != "3" {
		return fmt.Errorf("%s=%q on rank 0", EnvRendezvousFD, v)
	}
	ln, err := net.FileListener(os.NewFile(RendezvousFD, "rendezvous"))
	if err != nil {
		return fmt.Errorf("fd 3 is not a listener: %v", err)
	}
	defer ln.Close()
	if ln.Addr().String() != addr {
		return fmt.Errorf("fd 3 listens at %s, %s=%s", ln.Addr(), EnvAddr, addr)
	}
	ln.(*net.TCPListener).SetDeadline(deadline)
	seen := map[string]bool{}
	var conns []net.Conn
	for range size - 1 {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		r, k, _ := strings.Cut(strings.TrimSpace(line), " ")
		if k != key {
			return fmt.Errorf("rank %s has job key %q, rank 0 has %q", r, k, key)
		}
		seen[r] = true
		conns = append(conns, c)
	}
	if len(seen) != size-1 {
		return fmt.Errorf("ranks seen: %v", seen)
	}
	for _, c := range conns {
		if _, err := c.Write([]byte("go\n")); err != nil {
			return err
		}
	}
	return nil
}
