//go:build linux

package main

import (
	"bytes"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns the two ends of a new pseudo-terminal: the terminal
// (the end a program writes to) and the controller.
func openPTY(t *testing.T) (term, ctl *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ctl.Close() })
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return term, ctl
}

// TestProgressOnlyOnATerminal: the progress line is shown on a terminal,
// rewritten in place and erased; a buffer, a pipe or a file gets nothing.
func TestProgressOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	if newProgress(&buf) != nil {
		t.Error("a progress line on a buffer")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if newProgress(w) != nil {
		t.Error("a progress line on a pipe")
	}
	var none *progressLine // what newProgress gives elsewhere: every method is a no-op
	none.show("latency 1 B", 1, 3)
	none.clear()
	if none.hook() != nil {
		t.Error("a hook without a terminal")
	}

	term, ctl := openPTY(t)
	p := newProgress(term)
	if p == nil {
		t.Fatal("no progress line on a terminal")
	}
	p.hook()("bandwidth 64 MiB", 2, 3)
	p.clear()
	p.clear() // nothing shown: nothing to erase
	want := "\r\x1b[Kcourier bench: measuring bandwidth 64 MiB, figure 2 of 3 (0s so far)\r\x1b[K"
	ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	chunk := make([]byte, 256)
	for len(got) < len(want) { // the terminal may hand the writes over in pieces
		n, err := ctl.Read(chunk)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, chunk[:n]...)
	}
	if string(got) != want {
		t.Errorf("the terminal got %q, want %q", got, want)
	}
}
