package mp

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/courier-mp/courier/bootstrap"
)

// TestKnownVarsCoverSource: every COURIER_ variable the module's Go
// source names in a string is in knownVars, so Init never calls one of
// courier's own variables a misspelling.
func TestKnownVarsCoverSource(t *testing.T) {
	literal := regexp.MustCompile(`"(COURIER_[A-Z][A-Z0-9_]*)`)
	root := filepath.Join("..")
	seen := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || path == filepath.Join(root, "mp", "envvars_test.go") {
			return nil // this file names misspellings on purpose
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllSubmatch(b, -1) {
			seen[string(m[1])] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 20 {
		t.Fatalf("found only %d COURIER_ variables in the source: %v", len(seen), seen)
	}
	for name, path := range seen {
		if !slices.Contains(knownVars, name) {
			t.Errorf("%s names %s, which is not in knownVars (mp/envvars.go): add it there", path, name)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"BACKEND", "BACKEND", 0}, {"BACKNED", "BACKEND", 1}, {"TIMOUT", "TIMEOUT", 1},
		{"", "abc", 3}, {"kitten", "sitting", 3}, {"CA", "ABC", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCheckEnvNames(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string // "" for no error
	}{
		{[]string{"COURIER_BACKNED=tcp"}, "COURIER_BACKNED is set, but courier reads no such variable: did you mean COURIER_BACKEND?"},
		{[]string{"HOME=/root", "COURIER_TIMOUT=3s"}, "did you mean COURIER_TIMEOUT?"},
		{[]string{"COURIER_CHEK=1"}, "did you mean COURIER_CHECK?"},
		{[]string{"COURIER_RANKS=2"}, "did you mean COURIER_RANK?"},
		{[]string{"COURIER_BACKEND=tcp", "COURIER_TIMEOUT=3s", "COURIER_CHECK=1"}, ""},
		{[]string{"COURIER_MY_APP_SETTING=1", "COURIER_X=1"}, ""}, // a program's own
		{[]string{"BACKNED=1", "courier_backned=1"}, ""},          // not courier's prefix
	} {
		err := checkEnvNames(tc.env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkEnvNames(%q) = %v, want nil", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid)):
			t.Errorf("checkEnvNames(%q) = %v, want ErrInvalid saying %q", tc.env, err, tc.want)
		}
	}
}

// TestInitRefusesMisspeltVariable: with the process environment, Init
// fails on COURIER_BACKNED instead of ignoring it.
func TestInitRefusesMisspeltVariable(t *testing.T) {
	t.Setenv("COURIER_BACKNED", "tcp")
	job := bootstrap.Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "single"}
	_, err := Init(context.Background(), WithJob(job))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "did you mean COURIER_BACKEND?") {
		t.Fatalf("Init with COURIER_BACKNED set = %v, want ErrInvalid naming COURIER_BACKEND", err)
	}
}

func TestUnknownBackendDidYouMean(t *testing.T) {
	for name, want := range map[string]string{
		"ncl": `did you mean "nccl"?`, "NCCL2": `did you mean "nccl"?`, "hots": `did you mean "host"?`,
		"tpc": `did you mean "tcp"?`, "atuo": `did you mean "auto"?`, "carrier-pigeon": "",
	} {
		_, _, err := pickDriver(name)
		if err == nil || !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "unknown backend") {
			t.Errorf("pickDriver(%q) = %v, want an unknown backend", name, err)
			continue
		}
		if got := strings.Contains(err.Error(), "did you mean"); want == "" && got || want != "" && !strings.Contains(err.Error(), want) {
			t.Errorf("pickDriver(%q) = %v, want %q", name, err, want)
		}
	}
}
