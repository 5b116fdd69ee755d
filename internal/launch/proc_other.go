//go:build !unix

package launch

import (
	"fmt"
	"os"
	"syscall"
)

// sigTerm asks a rank to stop; without Unix signals that means killing it.
var sigTerm os.Signal = os.Kill

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalRank delivers sig to the rank's process; a signal the system cannot
// deliver kills it.
func signalRank(p *os.Process, sig os.Signal) {
	if sig == os.Kill || p.Signal(sig) != nil {
		p.Kill()
	}
}

func describeState(st *os.ProcessState) (string, int) {
	if c := st.ExitCode(); c >= 0 {
		return fmt.Sprintf("exit status %d", c), c
	}
	return st.String(), 1
}

func signalExitCode(os.Signal) int { return 1 }
