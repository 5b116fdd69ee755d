package shm

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// A transfer is split into iovecs of at most cmaIov bytes, cmaIovs per
// system call (1 GiB: under the kernel's cap of about 2 GiB per call).
const (
	cmaIov  = 64 << 20
	cmaIovs = 16
)

// yamaScope is where the Yama security module keeps its ptrace policy.
const yamaScope = "/proc/sys/kernel/yama/ptrace_scope"

// ReadFrom copies len(local) bytes from address remote in process pid
// into local, with one copy (process_vm_readv: the kernel copies from the
// other process's pages, no shared buffer in between). It returns the
// bytes copied; a partial transfer is continued until all are, or an
// error. The caller blocks for the whole copy; it does not allocate.
//
// The kernel allows it when this process may ptrace pid (same user, and
// no stricter policy such as Yama's ptrace_scope): when it refuses, or
// lacks the call, the error matches ErrNotSupported and says why. A pid
// that no longer exists is an error matching syscall.ESRCH; remote memory
// not mapped in pid is one matching syscall.EFAULT.
func ReadFrom(pid int, local []byte, remote uintptr) (int, error) {
	return transfer(pid, local, remote, false)
}

// WriteTo copies local to address remote in process pid, with one copy
// (process_vm_writev), as ReadFrom copies the other way; the same rules
// and errors apply. The remote process must expect the write (its buffer
// handed over by a protocol), since it sees nothing happen.
func WriteTo(pid int, remote uintptr, local []byte) (int, error) {
	return transfer(pid, local, remote, true)
}

func transfer(pid int, local []byte, remote uintptr, write bool) (int, error) {
	done := 0
	for done < len(local) {
		var liov [cmaIovs]unix.Iovec
		var riov [cmaIovs]unix.RemoteIovec
		k, off := 0, done
		for ; k < cmaIovs && off < len(local); k++ {
			n := min(len(local)-off, cmaIov)
			liov[k].Base = &local[off]
			liov[k].SetLen(n)
			riov[k] = unix.RemoteIovec{Base: remote + uintptr(off), Len: n}
			off += n
		}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, liov[:k], riov[:k], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, liov[:k], riov[:k], 0)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, transferError(pid, write, remote+uintptr(done), len(local)-done, err)
		}
		if n <= 0 {
			return done, fmt.Errorf("shm: %s: no progress at %#x in process %d (%d bytes left)", cmaName(write), remote+uintptr(done), pid, len(local)-done)
		}
		done += n
	}
	return done, nil
}

func cmaName(write bool) string {
	if write {
		return "process_vm_writev"
	}
	return "process_vm_readv"
}

func transferError(pid int, write bool, at uintptr, left int, err error) error {
	name := cmaName(write)
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("shm: %s refused (%s): %w (%w)", name, ptraceReason(pid), ErrNotSupported, err)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("shm: %s: %w by this kernel (%w)", name, ErrNotSupported, err)
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("shm: %s: process %d is gone (%w)", name, pid, err)
	}
	return fmt.Errorf("shm: %s of %d bytes at %#x in process %d: %w", name, left, at, pid, err)
}

// ptraceReason says why the kernel may refuse to let this process ptrace
// pid.
func ptraceReason(pid int) string {
	if b, err := os.ReadFile(yamaScope); err == nil {
		return fmt.Sprintf("ptrace scope %s = %s", yamaScope, strings.TrimSpace(string(b)))
	}
	return fmt.Sprintf("not allowed to ptrace process %d: another user's, not dumpable, or refused by a security module", pid)
}

// CanReadFrom reports whether ReadFrom and WriteTo work with process pid:
// it reads the pattern at probeAddr, the address pid's ProbeAddr returned
// (published at setup), and checks it. nil means single-copy transfers
// work; an error matching ErrNotSupported means the kernel refuses them
// (use a copy through shared memory instead); another error means a bad
// address, or a pid that is not the process that published it.
func CanReadFrom(pid int, probeAddr uintptr) error {
	var got [len(probe)]byte
	if _, err := ReadFrom(pid, got[:], probeAddr); err != nil {
		return err
	}
	if got != probe {
		return fmt.Errorf("shm: process %d holds %q at %#x, not the probe's pattern: a wrong address, or another process", pid, got[:], probeAddr)
	}
	return nil
}
