package testscope

import (
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
)

// Announce tells whoever runs the tests, in one line, that package pkg
// runs its short form and what that leaves out (short), and how to run
// everything; in the full form it says nothing. It is called from
// TestMain, before m.Run, and returns an error (the test binary should
// exit with it) if Env has a value Mode refuses.
//
// go test shows a passing package's output only under -v, so the line
// goes to standard error under -v and otherwise to the terminal, if the
// tests run at one (a run without one, as in CI, is not told).
func Announce(pkg, short string) error {
	full, err := Mode()
	if err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if full {
		return nil
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	line := fmt.Sprintf("%s: short form: %s (%s=1 runs everything, as CI does)\n", pkg, short, Env)
	if testing.Verbose() {
		io.WriteString(os.Stderr, line)
		return nil
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		io.WriteString(tty, line)
		tty.Close()
	}
	return nil
}
