package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/courier-mp/courier/internal/launch"
)

// runSynopsis is courier run's usage line, printed with a usage error.
const runSynopsis = `usage: courier run -np N [--no-prefix] [--timeout D] [--] <program | ./package> [args...]
Run "courier help run" for details.
`

// runUsage is courier help run.
const runUsage = `usage: courier run -np N [--no-prefix] [--timeout D] [--] <program | ./package> [args...]

Run starts N copies (ranks) of a program on this machine, as one courier job.

The program is an executable (a name without a slash is looked up on PATH),
or a Go package directory (., ./cmd/sim, ../sim, /src/sim, or a bare name of
a directory here that holds .go files) or a .go file, which courier builds
once with "go build" into a temporary directory, removed at the end.

Each rank inherits courier's environment, without any rank variables of
other launchers (OMPI_COMM_WORLD_*, PMI_*, PMIX_*, SLURM_PROCID, ...), plus
COURIER_RANK, COURIER_SIZE, COURIER_LOCAL_RANK, COURIER_LOCAL_SIZE,
COURIER_ADDR (rank 0's rendezvous, 127.0.0.1:port) and COURIER_JOB_KEY (a
fresh secret shared by the job's ranks). Rank 0 inherits the rendezvous
socket, already listening, as file descriptor 3 (COURIER_RENDEZVOUS_FD=3).
The ranks' standard input is /dev/null.

Each line a rank writes to stdout or stderr is copied, whole, to courier's
stdout or stderr, prefixed with "[rank] ".

When a rank fails (exits non-zero or is killed by a signal), the others are
sent SIGTERM, then SIGKILL 2s later. courier names the rank that failed
first (on Linux, the first to die, even when the ranks that exited because
they lost it are reaped before it), and exits with its status. A first SIGINT or SIGTERM sent to
courier is forwarded to every rank, and courier waits; a second one kills
them.

On --timeout, and on the first SIGINT or SIGTERM, courier first asks every
rank that uses courier what it is waiting for, and prints their pending
operations together (each with the line of the program that called it),
waiting at most 2s for the answers, and the wait-for graph of the job: who
waits for whom, each cycle in words ("head-to-head blocking sends: use
Sendrecv, or Isend before the receive"), and each rank waited for that waits
for nothing. Then it stops or signals the ranks. The same report is printed
when a rank's wait passes its COURIER_TIMEOUT, before that rank aborts.
It asks over a socket each rank inherits (COURIER_CONTROL_FD), not with a
signal, so the program's signal handling is untouched.

Flags:

	-np N, -n N   number of ranks to start (required, at least 1)
	--no-prefix   copy the ranks' output as it is, without "[rank] "
	--timeout D   stop the job if it runs longer than D (e.g. 30s, 5m)

Exit status: 0 when every rank exits 0; the exit status of the first rank to
fail, or 128+n if it was killed by signal n; 128+n when courier forwarded
signal n and some rank did not exit 0 (130 for SIGINT); 124 on --timeout;
127 if the program is not found, 126 if it cannot be executed; 2 for a
usage error; 1 otherwise (such as a failed build).
`

// runJob is courier run.
func (a *app) runJob(args []string) int {
	fs := flag.NewFlagSet("courier run", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {} // printed below, after fs.Parse's error message
	var np int
	fs.IntVar(&np, "np", 0, "number of ranks")
	fs.IntVar(&np, "n", 0, "number of ranks")
	noPrefix := fs.Bool("no-prefix", false, "do not prefix output lines")
	timeout := fs.Duration("timeout", 0, "stop the job after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(a.stdout, runUsage)
			return 0
		}
		io.WriteString(a.stderr, runSynopsis) // after fs.Parse's error message
		return 2
	}
	usageError := func(format string, args ...any) int {
		fmt.Fprintf(a.stderr, "courier run: "+format+"\n", args...)
		io.WriteString(a.stderr, runSynopsis)
		return 2
	}
	switch {
	case np < 1:
		return usageError("-np N is required, with N at least 1")
	case *timeout < 0:
		return usageError("--timeout must not be negative")
	case fs.NArg() == 0:
		return usageError("no program to run")
	}
	sigs, stop := a.signals()
	defer stop()
	res := launch.Run(context.Background(), launch.Config{
		NP:       np,
		Program:  fs.Arg(0),
		Args:     fs.Args()[1:],
		Stdout:   a.stdout,
		Stderr:   a.stderr,
		NoPrefix: *noPrefix,
		Timeout:  *timeout,
		Signals:  sigs,
	})
	return res.ExitCode
}
