package launch

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestLineWriter(t *testing.T) {
	t.Parallel()
	var o output
	var buf bytes.Buffer
	w := newLineWriter(&o, &buf, "[7] ")
	for _, p := range []string{"ab", "c\nde", "f\n\ng", "", "h\ni\nj"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if got, want := buf.String(), "[7] abc\n[7] def\n[7] \n[7] gh\n[7] i\n"; got != want {
		t.Fatalf("before Flush: %q, want %q", got, want)
	}
	w.Flush()
	w.Flush()
	if got, want := buf.String(), "[7] abc\n[7] def\n[7] \n[7] gh\n[7] i\n[7] j\n"; got != want {
		t.Fatalf("after Flush: %q, want %q", got, want)
	}
}

func TestLineWriterLongLine(t *testing.T) {
	t.Parallel()
	var o output
	var buf bytes.Buffer
	w := newLineWriter(&o, &buf, "> ")
	long := strings.Repeat("z", 2*maxLine+10)
	for i := 0; i < len(long); i += 4096 {
		w.Write([]byte(long[i:min(i+4096, len(long))]))
	}
	w.Write([]byte("\n"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || len(lines[0]) != 2+maxLine || lines[2] != "> "+strings.Repeat("z", 10) {
		t.Fatalf("%d lines of lengths %d...", len(lines), len(lines[0]))
	}
}

// TestLineWriterConcurrent has many writers share one output; every line
// must arrive whole.
func TestLineWriterConcurrent(t *testing.T) {
	t.Parallel()
	var o output
	var buf bytes.Buffer
	var wg sync.WaitGroup
	for r := range 8 {
		w := newLineWriter(&o, &buf, fmt.Sprintf("[%d] ", r))
		wg.Go(func() {
			for k := range 500 {
				line := fmt.Sprintf("rank %d line %d %s\n", r, k, strings.Repeat("y", k%50))
				// Write in two pieces to split the line.
				w.Write([]byte(line[:len(line)/2]))
				w.Write([]byte(line[len(line)/2:]))
			}
			w.Flush()
		})
	}
	wg.Wait()
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		var a, b, k int
		var ys string
		n, _ := fmt.Sscanf(line, "[%d] rank %d line %d %s", &a, &b, &k, &ys)
		if n < 3 || a != b || (n == 4 && len(ys) != k%50) {
			t.Fatalf("broken line %q", line)
		}
	}
}

func TestChildEnv(t *testing.T) {
	t.Parallel()
	parent := []string{
		"PATH=/bin", "COURIER_RANK=5", "COURIER_BACKEND=tcp", "OMPI_COMM_WORLD_LOCAL_RANK=1",
		"OMPI_MCA_btl=tcp", "PMI_FD=4", "PMIX_NAMESPACE=x", "SLURM_PROCID=0", "SLURM_JOB_ID=9",
		"MPI_LOCALRANKID=0", "COURIER_RENDEZVOUS_FD=3", "NOEQUALS",
	}
	orig := slices.Clone(parent)
	got := ChildEnv(parent, 2, 4, "127.0.0.1:9", "k", false)
	want := []string{
		"PATH=/bin", "COURIER_BACKEND=tcp", "OMPI_MCA_btl=tcp", "SLURM_JOB_ID=9", "NOEQUALS",
		"COURIER_RANK=2", "COURIER_SIZE=4", "COURIER_LOCAL_RANK=2", "COURIER_LOCAL_SIZE=4",
		"COURIER_ADDR=127.0.0.1:9", "COURIER_JOB_KEY=k",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv =\n%q\nwant\n%q", got, want)
	}
	if !slices.Equal(parent, orig) {
		t.Errorf("parent modified")
	}
	got0 := ChildEnv(parent, 0, 4, "a", "k", true)
	if got0[len(got0)-1] != "COURIER_RENDEZVOUS_FD=3" {
		t.Errorf("rank 0 env ends %q", got0[len(got0)-1])
	}
}

var hexKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestNewJobKey(t *testing.T) {
	t.Parallel()
	a, b := NewJobKey(), NewJobKey()
	if !hexKey.MatchString(a) || !hexKey.MatchString(b) || a == b {
		t.Errorf("keys %q, %q", a, b)
	}
}

func TestRanges(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []int
		want string
	}{
		{[]int{3}, "3"},
		{[]int{0, 1, 3}, "0, 1, 3"},
		{[]int{0, 1, 2, 5, 7, 8, 9, 10}, "0-2, 5, 7-10"},
	} {
		if got := ranges(c.in); got != c.want {
			t.Errorf("ranges(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	if TimedOut.String() != "timed out" || Outcome(99).String() != "Outcome(99)" {
		t.Error(TimedOut.String(), Outcome(99).String())
	}
}
