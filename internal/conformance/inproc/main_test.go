package inproc_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/courier-mp/courier/internal/leakcheck"
	"github.com/courier-mp/courier/internal/testscope"
)

func TestMain(m *testing.M) {
	if err := testscope.Announce("internal/conformance/inproc", "the suites run on fewer rank counts (none on 5 to 7), the heavy cases once per backend"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(leakcheck.Check(m.Run()))
}
