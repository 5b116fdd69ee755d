package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// IsPackage reports whether Run builds arg with go build before running it,
// rather than running it as an executable:
//
//   - a directory named by a path ("." or "..", or an argument containing a
//     path separator, such as ./cmd/sim, ../sim or /src/sim) is a package;
//   - a bare name (no separator) is a package only if it names a directory
//     in the current directory that holds .go files, so that a command on
//     PATH is not shadowed by an unrelated directory of the same name;
//   - an existing regular file whose name ends in .go is built as a
//     one-file program, like go run main.go.
//
// Anything else, including ./prog when ./prog is an executable file, is run
// as it is.
func IsPackage(arg string) bool {
	info, err := os.Stat(arg)
	if err != nil {
		return false
	}
	if info.IsDir() {
		if arg == "." || arg == ".." || strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator) {
			return true
		}
		return hasGoFiles(arg)
	}
	return info.Mode().IsRegular() && strings.HasSuffix(arg, ".go")
}

func hasGoFiles(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(m) > 0
}

// Build compiles the Go package directory or .go file named by arg with the
// go command found on PATH (go build -o <tempdir>/<name>, run in the
// package's own directory, so a package of another module builds with that
// module's go.mod). env is go build's environment (nil: the launcher's).
// What go build prints goes to log (nil: discarded). Build returns the
// binary's path and a function that removes its temporary directory; on
// error nothing is left behind. Canceling ctx interrupts go build.
func Build(ctx context.Context, arg string, env []string, log io.Writer) (bin string, cleanup func(), err error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", nil, err
	}
	info, err := os.Stat(abs)
	if err != nil {
		return "", nil, err
	}
	dir, target, name := abs, ".", filepath.Base(abs)
	if !info.IsDir() {
		dir, target = filepath.Dir(abs), filepath.Base(abs)
		name = strings.TrimSuffix(target, ".go")
	}
	if name == "" || name == "." || name == string(filepath.Separator) {
		name = "main"
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	tmp, err := os.MkdirTemp("", "courier-run-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	bin = filepath.Join(tmp, name)

	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, target)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = log
	cmd.Stderr = log
	// On cancel, let go build clean its own work directory; kill it if it
	// does not stop soon.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		cleanup()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return "", nil, fmt.Errorf("go build %s: %w", arg, err)
	}
	return bin, cleanup, nil
}
