package work

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Bytes is a size in bytes that a command line gives as 4KiB, 64MiB, 1GiB
// (binary units, also written K, M, G; a space before the unit is
// allowed) or a plain number of bytes. It implements flag.Value.
type Bytes int64

// units are the suffixes Bytes accepts, longest first so that "KiB" is
// not read as "B".
var units = []struct {
	suffix string
	shift  uint
}{
	{"KiB", 10}, {"MiB", 20}, {"GiB", 30},
	{"K", 10}, {"M", 20}, {"G", 30},
	{"B", 0},
}

// ParseBytes reads a size as Bytes does: a whole number of bytes, at
// least 0, with an optional unit.
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	shift := uint(0)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, shift = strings.TrimSpace(rest), u.shift
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a whole number of bytes with an optional unit KiB, MiB or GiB (4KiB, 64MiB, 1GiB, 4096)", s)
	}
	if v > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Bytes(v << shift), nil
}

// Set implements flag.Value.
func (b *Bytes) Set(s string) error {
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// String implements flag.Value: the size in the largest unit that
// divides it (4 KiB, 1 GiB, 1536 KiB), or in bytes.
func (b Bytes) String() string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if b != 0 && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", b>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", int64(b))
}
