package nccl

import (
	"fmt"
	"os"
	"sync"

	"github.com/courier-mp/courier/backend"
)

// minVersion is the oldest NCCL the backend works with: non-blocking
// communicators and ncclCommFinalize came in 2.14.
const minVersion = 21400

// libs caches loaded libraries by path: a library is loaded once per
// process and never unloaded.
var libs struct {
	sync.Mutex
	m map[string]libResult
}

type libResult struct {
	l   *library
	err error
}

// loadLibrary loads the NCCL library at path (once per process) and
// checks its version.
func loadLibrary(path string) (*library, error) {
	libs.Lock()
	defer libs.Unlock()
	if r, ok := libs.m[path]; ok {
		return r.l, r.err
	}
	l, err := openLibrary(path)
	if err == nil && l.version < minVersion {
		err = fmt.Errorf("nccl: %w: %s is NCCL %s; courier needs %s or later",
			backend.ErrNotSupported, path, versionString(l.version), versionString(minVersion))
		l = nil
	}
	if libs.m == nil {
		libs.m = make(map[string]libResult)
	}
	libs.m[path] = libResult{l, err}
	return l, err
}

// versionString spells an NCCL version code ("2.28.3").
func versionString(v int) string {
	if v < 10000 { // before 2.9: X*1000 + Y*100 + Z
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// Version loads NCCL ($COURIER_NCCL_LIBRARY, or libnccl.so.2) and returns
// its version ("2.28.3") and the path it was loaded from. The error
// matches backend.ErrNotSupported when it cannot be loaded.
func Version() (version, path string, err error) {
	path = libraryPath(os.Getenv)
	l, err := loadLibrary(path)
	if err != nil {
		return "", path, err
	}
	return versionString(l.version), path, nil
}
