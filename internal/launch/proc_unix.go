//go:build unix

package launch

import (
	"fmt"
	"os"
	"syscall"
)

// sigTerm asks a rank to stop.
var sigTerm os.Signal = syscall.SIGTERM

// signalRank delivers sig to a rank's process group (the rank and any
// process it started that stayed in its group), as a terminal delivers
// Ctrl-C to its foreground group. Each rank leads its own group (Setpgid),
// so the launcher's own group, which the terminal signals, holds no rank:
// a rank receives a signal once, from the launcher. If the group cannot be
// signalled, the process is.
func signalRank(p *os.Process, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && p.Pid > 0 {
		if syscall.Kill(-p.Pid, s) == nil {
			return
		}
	}
	p.Signal(sig)
}

// describeState says how a process ended, in the words of courier run's
// messages, and the exit code the launcher adopts for it: the exit status,
// or 128+n for death by signal n.
func describeState(st *os.ProcessState) (string, int) {
	ws, ok := st.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		d := "killed by signal: " + ws.Signal().String()
		if ws.CoreDump() {
			d += " (core dumped)"
		}
		return d, 128 + int(ws.Signal())
	case ok && ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus()), ws.ExitStatus()
	}
	return st.String(), 1
}

// signalExitCode is the exit code of a process killed by sig: 128+n.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
