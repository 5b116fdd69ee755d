//go:build unix

package bootstrap

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkOwner makes sure directory dir (fi) belongs to this user and only
// this user can write to it.
func checkOwner(dir string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d)", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by others (mode %v)", dir, fi.Mode().Perm())
	}
	return nil
}
