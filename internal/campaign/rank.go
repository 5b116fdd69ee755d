package campaign

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/courier-mp/courier/mp"
)

// RoleEnv, set in a process's environment, makes it a rank of a trial
// (RankMain) rather than a test run; its value is the workload's seed.
const RoleEnv = "COURIER_CAMPAIGN_SEED"

// SelfTestEnv, set to "hang", makes a rank wait forever once an
// operation failed, after it closed, instead of exiting: the harness's own
// test of its hang detection.
const SelfTestEnv = "COURIER_CAMPAIGN_SELFTEST"

// InRank reports whether this process is a rank of a trial.
func InRank() bool { return os.Getenv(RoleEnv) != "" }

// RankMain is a rank of a trial: it joins the job its environment
// describes, prints "ready" and the transport to each peer, and runs the
// workload of its seed round after round until an operation fails. It
// then prints one line, "END", with when, what failed and how, closes the
// communicator and returns the exit status. A wrong result also ends the
// rank (its END says wrong=true).
func RankMain() int {
	seed, err := strconv.ParseUint(os.Getenv(RoleEnv), 10, 64)
	if err != nil {
		fmt.Printf("END init=false err=%s=%q: %v\n", RoleEnv, os.Getenv(RoleEnv), err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	comm, err := mp.Init(ctx)
	cancel()
	if err != nil {
		fmt.Printf("END init=false err=%s\n", oneLine(err))
		return 1
	}
	tr := make([]string, comm.Size())
	for p := range tr {
		tr[p] = comm.Transport(p)
	}
	fmt.Printf("ready %s\n", strings.Join(tr, ","))
	plan := Plan(seed, comm.Size())
	for k := 0; ; k++ {
		s := plan[k%len(plan)]
		if err := Run(comm, s, k); err != nil {
			at := time.Now().UnixNano()
			lost := -1
			if oe, ok := errors.AsType[*mp.OpError](err); ok {
				lost, _ = oe.LostRank()
			}
			fmt.Printf("END at=%d steps=%d step=%s peerlost=%t lost=%d wrong=%t err=%s\n",
				at, k, s.Kind, errors.Is(err, mp.ErrPeerLost), lost, errors.Is(err, errWrong), oneLine(err))
			comm.Close()
			if os.Getenv(SelfTestEnv) == "hang" {
				// Closed first, so that a survivor waiting on this one
				// also ends its step, prints its END and hangs.
				select {}
			}
			return 0
		}
	}
}

// oneLine keeps an error's text on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " | ") }
