package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// ErrFormat is the error of input that is not a courier trace: malformed
// JSON, a trace-event file without courier's metadata, a newer version,
// events that contradict themselves. The wrapping error says what and
// where.
var ErrFormat = errors.New("not a courier trace")

// ReadFile reads and checks the trace in the file at path. Its errors
// name the file; a file that cannot be opened is the os error, and one
// whose content is not a courier trace matches ErrFormat.
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	f, err := Read(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Read reads one trace, a JSON object, from r and checks it: courier's
// metadata present and of a version this package reads, every rank named
// once, every span of a rank the metadata lists, with a start and a
// duration (neither negative nor missing) within some 30 years of the
// origin. Nothing may follow the
// object but white space. Its errors match ErrFormat (or are r's).
func Read(r io.Reader) (*File, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, fmt.Errorf("%w: more data after the trace's JSON object", ErrFormat)
		}
		return nil, decodeError(err)
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

// decodeError says what the JSON decoder found wrong, wrapped in
// ErrFormat (a read error of the input stays what it was).
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w: malformed JSON at byte %d: %v", ErrFormat, syn.Offset, err)
	case errors.As(err, &typ):
		return fmt.Errorf("%w: %v", ErrFormat, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: empty input", ErrFormat)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the JSON ends early (a file cut short?)", ErrFormat)
	}
	return err // the input's own read error
}

// maxMicros bounds the times of a span (microseconds from the origin),
// so that what reads a file computes with finite numbers.
const maxMicros = 1e15

// check validates what Read decoded.
func (f *File) check() error {
	m := f.OtherData
	if m == nil || m.Format != FormatName {
		return fmt.Errorf("%w: no courier metadata (otherData.format is not %q): a trace-event file from another program?", ErrFormat, FormatName)
	}
	if m.Version < 1 || m.Version > Version {
		return fmt.Errorf("%w: format version %d, and this courier reads version %d", ErrFormat, m.Version, Version)
	}
	if len(m.Ranks) == 0 {
		return fmt.Errorf("%w: the metadata lists no rank", ErrFormat)
	}
	ranks := make(map[int]bool, len(m.Ranks))
	for _, r := range m.Ranks {
		if r.Rank < 0 || r.Size <= r.Rank {
			return fmt.Errorf("%w: rank %d of a job of %d ranks", ErrFormat, r.Rank, r.Size)
		}
		if ranks[r.Rank] {
			return fmt.Errorf("%w: the metadata lists rank %d twice", ErrFormat, r.Rank)
		}
		ranks[r.Rank] = true
	}
	for i, e := range f.TraceEvents {
		if e.Ph == "" {
			return fmt.Errorf("%w: event %d has no phase (ph)", ErrFormat, i)
		}
		if !ranks[e.Pid] {
			return fmt.Errorf("%w: event %d (%q) is of pid %d, a rank the metadata does not list", ErrFormat, i, e.Name, e.Pid)
		}
		if e.Ph != "X" {
			continue
		}
		if !(math.Abs(e.Ts) <= maxMicros) {
			return fmt.Errorf("%w: span %d (%q) starts at %g µs, beyond %g µs (some 30 years) from the origin", ErrFormat, i, e.Name, e.Ts, maxMicros)
		}
		if e.Dur == nil || !(*e.Dur >= 0 && *e.Dur <= maxMicros) {
			return fmt.Errorf("%w: span %d (%q) has a missing, negative or too long duration", ErrFormat, i, e.Name)
		}
	}
	return nil
}
