//go:build !unix

package bootstrap

import (
	"fmt"
	"os"
)

// checkDir makes sure the directory of the address files is a directory;
// this platform's ownership is not checked.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}
