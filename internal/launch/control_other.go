//go:build !unix

package launch

import (
	"errors"
	"os"
)

// socketPair: no control channel without Unix sockets.
func socketPair() (*os.File, *os.File, error) {
	return nil, nil, errors.New("no socket pairs on this system")
}
