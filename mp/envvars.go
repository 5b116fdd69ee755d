package mp

import (
	"os"
	"slices"
	"strings"
)

// envPrefix begins every variable courier reads.
const envPrefix = "COURIER_"

// knownVars are all the COURIER_ variables courier reads, in any package:
// the launch, the settings, the transports', and the ones only its own
// tests and tools read. It is the one list: a test of this package fails
// when the source reads a COURIER_ variable that is not here. Init
// refuses an unknown COURIER_ variable that is a near miss of one of
// these (checkEnvNames).
var knownVars = []string{
	// The launch (courier run, or by hand).
	"COURIER_RANK", "COURIER_SIZE", "COURIER_LOCAL_RANK", "COURIER_LOCAL_SIZE",
	"COURIER_ADDR", "COURIER_JOB_KEY", "COURIER_RENDEZVOUS_FD", "COURIER_CONTROL_FD",
	// Settings.
	"COURIER_BACKEND", "COURIER_TIMEOUT", "COURIER_WATCHDOG", "COURIER_CHECK", "COURIER_DEBUG", "COURIER_IFACE", "COURIER_TRACE",
	"COURIER_TRANSPORTS", "COURIER_SHM_COPY", "COURIER_SHM_COPYIN", "COURIER_SHM_PREFAULT", "COURIER_SHM_SPLIT", "COURIER_DEVICE", "COURIER_TCP_USER_TIMEOUT", "COURIER_ENCRYPT",
	"COURIER_NCCL_LIBRARY", "COURIER_CUDA_LIBRARY", "COURIER_NCCL_TRACE", "COURIER_NCCL_BLOCKING",
	"COURIER_NCCL_EVENTS", "COURIER_NCCL_COLLECTIVES", "COURIER_NCCL_SHARED_STREAM", "COURIER_CUDA_IPC", "COURIER_DEVICE_COLL",
	// Courier's own tests and scripts.
	"COURIER_CASES", "COURIER_CASES_LIGHT", "COURIER_REQUIRE_GPU", "COURIER_REQUIRE_NETNS", "COURIER_TEST_ROLE", "COURIER_TEST_FULL",
	"COURIER_TEST_KEEP", "COURIER_TEST_FAKEGPU_CHILD", "COURIER_TEST_MPI_CHILD",
	"COURIER_CUDA_TEST_CHILD", "COURIER_SHM_TEST_ROLE", "COURIER_WANT_TRANSPORT", "COURIER_BIN",
	"COURIER_LEAKCHECK_TMPDIR_OWNER", "COURIER_CAMPAIGN_SEED", "COURIER_CAMPAIGN_SELFTEST",
}

// checkEnvNames returns an error naming the first variable of environ (as
// os.Environ gives it) whose name begins with COURIER_, is not one courier
// reads, and is a near miss of one that it does: a misspelt setting
// (COURIER_BACKNED) would otherwise be ignored without a word. Other
// unknown COURIER_ variables are left alone: they may be a program's own.
func checkEnvNames(environ []string) error {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(knownVars, name) {
			continue
		}
		if near, ok := nearest(name, knownVars, envPrefix); ok {
			return invalidf("%s is set, but courier reads no such variable: did you mean %s? "+
				"(an unknown COURIER_ variable this close to a known one is refused; rename or unset it)", name, near)
		}
	}
	return nil
}

// nearest returns the one candidate closest to name (after prefix, which
// both share or lack) when it is a near miss: within one edit (an
// insertion, deletion, substitution or swap of neighbours) for names of
// up to four letters, two for longer ones; ok is false when none is, or
// when two are equally near.
func nearest(name string, candidates []string, prefix string) (best string, ok bool) {
	n := strings.TrimPrefix(name, prefix)
	limit := 2
	if len(n) <= 4 {
		limit = 1
	}
	bestD, ties := limit+1, 0
	for _, c := range candidates {
		d := editDistance(n, strings.TrimPrefix(c, prefix))
		switch {
		case d < bestD:
			best, bestD, ties = c, d, 1
		case d == bestD:
			ties++
		}
	}
	return best, bestD <= limit && bestD > 0 && ties == 1
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of neighbours
// (each substring edited once) that turn a into b, byte by byte.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// processEnviron is os.Environ, a variable for the tests.
var processEnviron = os.Environ
