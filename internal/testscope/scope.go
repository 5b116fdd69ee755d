package testscope

import (
	"fmt"
	"os"
	"strconv"
)

// Env is the variable that selects the full form: 1 (or any true value
// of strconv.ParseBool) runs every slow test in full; unset, empty or 0
// the short form.
const Env = "COURIER_TEST_FULL"

// Mode reads Env: whether the tests run in full, or an error naming the
// variable and its value if that is not a boolean.
func Mode() (full bool, err error) {
	v := os.Getenv(Env)
	if v == "" {
		return false, nil
	}
	full, err = strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 (the full form) or 0 (the short form)", Env, v)
	}
	return full, nil
}

// Full reports whether the tests run in full. A value Mode refuses counts
// as the short form (Announce fails the package's tests over it).
func Full() bool {
	full, _ := Mode()
	return full
}
