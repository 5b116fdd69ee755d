package testscope

import (
	"strings"
	"testing"
)

func TestMode(t *testing.T) {
	for _, tc := range []struct {
		v    string
		full bool
		bad  bool
	}{
		{"", false, false},
		{"0", false, false},
		{"1", true, false},
		{"true", true, false},
		{"yes", false, true},
		{"2", false, true},
	} {
		t.Setenv(Env, tc.v)
		full, err := Mode()
		if full != tc.full || (err != nil) != tc.bad {
			t.Errorf("%s=%q: Mode() = %v, %v; want %v, error %v", Env, tc.v, full, err, tc.full, tc.bad)
		}
		if err != nil && !strings.Contains(err.Error(), Env+"=\""+tc.v+"\"") {
			t.Errorf("%s=%q: the error does not name the variable and its value: %v", Env, tc.v, err)
		}
		if Full() != tc.full {
			t.Errorf("%s=%q: Full() = %v, want %v", Env, tc.v, Full(), tc.full)
		}
	}
}

// TestAnnounceRefuses: Announce fails over a value Mode refuses, naming
// the package, and says nothing in the full form.
func TestAnnounceRefuses(t *testing.T) {
	t.Setenv(Env, "maybe")
	if err := Announce("some/pkg", "less"); err == nil || !strings.HasPrefix(err.Error(), "some/pkg: "+Env) {
		t.Errorf("Announce with %s=maybe: %v", Env, err)
	}
	t.Setenv(Env, "1")
	if err := Announce("some/pkg", "less"); err != nil {
		t.Errorf("Announce in the full form: %v", err)
	}
}
