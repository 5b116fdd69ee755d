package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/exampletest"
)

// asRank in the environment makes the test binary the sync program.
const asRank = "SYNC_TEST_AS_RANK"

func TestMain(m *testing.M) { exampletest.Main(m, asRank, main) }

// The program under courier run on the host backend and on TCP: rank 1
// prints a matching checksum for each form; with -device, the GPU forms
// too where there is a GPU, else a line that says they were skipped.
func TestSyncUnderCourierRun(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	for _, c := range []struct{ backend, flag string }{{"host", ""}, {"tcp", ""}, {"tcp", "-device"}} {
		t.Run(c.backend+c.flag, func(t *testing.T) {
			t.Parallel()
			args := []string{"run", "-np", "2", "--", os.Args[0], "-n", "100000"}
			if c.flag != "" {
				args = append(args, c.flag)
			}
			cmd := exec.Command(courier, args...)
			cmd.Env = append(os.Environ(), asRank+"=1", "COURIER_BACKEND="+c.backend)
			stdout, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", stdout)
			out := string(stdout)
			for _, form := range []string{"blocking ", "non-blocking "} {
				assert.Regexp(t, `\[1\] `+form+` *100000 floats: rank 0 sent checksum ([0-9a-f]{8}), rank 1 received ([0-9a-f]{8}): match`, out)
			}
			if c.flag == "-device" && !strings.Contains(out, "stream-ordered: skipped, no GPU here") {
				assert.Regexp(t, `\[1\] stream-ordered +100000 floats: .*: match`, out)
				assert.Regexp(t, `\[1\] blocking \(GPU\) +100000 floats: .*: match`, out)
			}
		})
	}
}
