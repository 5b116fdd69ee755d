package campaign

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/leakcheck"
	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

var (
	trials  = flag.Int("campaign.trials", 3, "kill trials per transport")
	seed    = flag.Uint64("campaign.seed", 0, "the first trial's seed (0: from the clock)")
	maxKill = flag.Duration("campaign.maxkill", 400*time.Millisecond, "the latest moment of the kill after every rank is ready")
	hang    = flag.Duration("campaign.hang", 10*time.Second, "how long a survivor may take to end after the kill")
	keep    = flag.String("campaign.dir", "", "where to keep the ranks' output of bad trials")
	table   = flag.Bool("campaign.table", false, "print the summary table and each bad trial on standard output")
	each    = flag.Bool("campaign.each", false, "print every trial on standard output")
)

// TestMain makes the binary a rank of a trial when RoleEnv is set.
func TestMain(m *testing.M) {
	if InRank() {
		os.Exit(RankMain())
	}
	os.Exit(leakcheck.Check(m.Run()))
}

// TestKillCampaign runs kill trials on every host transport: 4 ranks run
// a random workload (point-to-point, exchanges, master–worker with
// receives from AnySource, large messages, every collective), one of
// them is killed with SIGKILL at a random moment, and every survivor must
// end within the bound with ErrPeerLost naming the killed rank, having
// received no wrong result. The short run (3 trials per transport; 1
// under the race detector) runs in CI; scripts/campaign.sh runs the long one and prints its table
// (docs/reliability.md has the figures).
func TestKillCampaign(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	first := *seed
	if first == 0 {
		first = uint64(time.Now().UnixNano())
	}
	n := *trials
	if raceOn && !flagSet("campaign.trials") {
		n = 1
	}
	var sums []Summary
	for _, tr := range Transports {
		var results []*Result
		for i := range n {
			cfg := Config{Exe: exe, Args: []string{"-test.run=^$"}, Transport: tr, Ranks: 4,
				Seed: first + uint64(i), MaxKill: *maxKill, HangBound: *hang, Dir: *keep}
			r := Trial(cfg)
			results = append(results, r)
			if r.Bad() {
				t.Errorf("%s", describe(r))
			}
			if *each || (*table && r.Bad()) {
				fmt.Println(describe(r))
			}
		}
		sums = append(sums, Summarize(tr.Name, results))
	}
	var b strings.Builder
	WriteTable(&b, sums)
	t.Logf("first seed %d\n%s", first, b.String())
	if *table {
		fmt.Printf("first seed %d, %d trials per transport, kill within %v, hang bound %v\n\n%s\n", first, n, *maxKill, *hang, b.String())
		WriteSteps(os.Stdout, sums)
	}
}

// describe tells what went wrong in a trial, to reproduce it.
func describe(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s trial, seed %d (rerun: -campaign.seed=%d -campaign.trials=1): rank %d killed after %v",
		r.Transport.Name, r.Seed, r.Seed, r.Victim, r.KillAfter.Round(time.Millisecond))
	if r.Setup != nil {
		fmt.Fprintf(&b, "\n\tsetup: %v", r.Setup)
	}
	for _, s := range r.Survivors {
		fmt.Fprintf(&b, "\n\trank %d: %s; ended=%t hung=%t panicked=%t early=%t wrong=%t peerlost=%t lost=%d after %v in %s: %s",
			s.Rank, s.Exit, s.Ended, s.Hung, s.Panicked, s.Early, s.Wrong, s.PeerLost, s.Lost, s.ToError.Round(time.Millisecond), s.Step, s.Err)
	}
	if r.Kept != "" {
		fmt.Fprintf(&b, "\n\toutput kept in %s", r.Kept)
	}
	return b.String()
}

// TestWorkloadRight runs a round of a workload on 4 ranks with no kill,
// over each host transport: every step completes and every check passes,
// so a failure in a trial is the kill's doing.
func TestWorkloadRight(t *testing.T) {
	plan := Plan(42, 4)
	seen := map[Kind]bool{}
	large := 0
	for _, s := range plan {
		seen[s.Kind] = true
		if s.N*8 >= LargeBytes {
			large++
		}
	}
	require.Len(t, seen, int(numKinds), "a plan has every kind")
	require.Positive(t, large, "a plan has large steps")
	backends := []string{"tcp", "host"}
	if raceOn {
		// Under the race detector: one transport, and small steps only
		// (the run without it checks the large ones).
		backends = backends[1:]
		for i := range plan {
			plan[i].N = min(plan[i].N, 4096)
		}
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			mptest.Run(t, 4, func(t *testing.T, c *mp.Comm) {
				for k, s := range plan {
					require.NoError(t, Run(c, s, k), "step %d (%s)", k, s.Kind)
				}
			}, mptest.WithBackend(backend), mptest.WithTimeout(60*time.Second))
		})
	}
}

// TestTrialFindsHang makes the survivors of a trial wait forever after
// their error: the trial reports each of them hung, with the kept output.
// (The bound leaves a loaded machine time to report the loss first.)
func TestTrialFindsHang(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	t.Setenv(SelfTestEnv, "hang")
	r := Trial(Config{Exe: exe, Args: []string{"-test.run=^$"}, Transport: Transports[0], Ranks: 3,
		Seed: 7, MaxKill: 50 * time.Millisecond, HangBound: 2 * time.Second, Dir: t.TempDir()})
	require.NoError(t, r.Setup)
	require.Len(t, r.Survivors, 2)
	for _, s := range r.Survivors {
		assert.True(t, s.Hung, "rank %d", s.Rank)
		assert.True(t, s.Ended, "rank %d printed its END before it hung", s.Rank)
	}
	assert.True(t, r.Bad())
	assert.NotEmpty(t, r.Kept)
	sum := Summarize("tcp", []*Result{r})
	assert.Equal(t, 2, sum.Hangs)
	assert.False(t, sum.Clean())
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
