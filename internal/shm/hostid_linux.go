package shm

import (
	"fmt"
	"os"
	"strings"
)

// hostNamespaces are the namespaces two processes must share to use the
// shared-memory path: net (abstract unix sockets, which carry the
// segments' descriptors, are per network namespace), pid (process_vm_readv
// and pidfd_open take the peer's pid), ipc, and user (ptrace permission).
var hostNamespaces = [...]string{"net", "pid", "ipc", "user"}

// HostID returns a string that is equal for two processes exactly when
// they can share memory and see each other's pids: the kernel's boot id
// (/proc/sys/kernel/random/boot_id: one per running kernel, so one per
// machine or virtual machine) and the identities of this process's net,
// pid, ipc and user namespaces (/proc/self/ns/*). Two ranks in different
// network namespaces, as courier's tests run ranks to simulate hosts, get
// different ids even on one machine.
func HostID() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("shm: host id: %w", err)
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(string(boot)))
	for _, ns := range hostNamespaces {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return "", fmt.Errorf("shm: host id: %w", err)
		}
		b.WriteString(" ")
		b.WriteString(l) // "net:[4026531833]"
	}
	return b.String(), nil
}
