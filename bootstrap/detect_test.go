//go:build unix && !mpi

// Detect from the environment alone: a -tags mpi build asks MPI instead.

package bootstrap

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// dupFD returns a descriptor of its own for f's file, to hand to Detect
// (which closes it).
func dupFD(t *testing.T, f *os.File) int {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forgetInherited(fd) })
	return fd
}

// forgetInherited closes the socket inherited as fd, if the package
// wrapped it (a process keeps it for its life; a test that made it
// up ends it, so the leak check sees nothing left).
func forgetInherited(fd int) {
	inheritedSockets.mu.Lock()
	defer inheritedSockets.mu.Unlock()
	if s := inheritedSockets.m[fd]; s != nil {
		s.ln.Close()
		s.file.Close()
		delete(inheritedSockets.m, fd)
	}
}

func TestDetectListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := dupFD(t, f)

	setEnv(t, map[string]string{"COURIER_RANK": "0", "COURIER_SIZE": "2", "COURIER_JOB_KEY": "k",
		"COURIER_RENDEZVOUS_FD": strconv.Itoa(fd)})
	job, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if job.Listener == nil {
		t.Fatal("Detect gave rank 0 no listener")
	}
	defer job.Listener.Close()
	if got, want := job.Listener.Addr().String(), ln.Addr().String(); got != want {
		t.Errorf("listener on %s, want %s", got, want)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	a, err := job.Listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}

func TestDetect(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		setEnv(t, map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3", "COURIER_ADDR": "h:1"})
		job, err := Detect()
		if err != nil {
			t.Fatal(err)
		}
		if job.Rank != 1 || job.Size != 3 || job.Launcher != "mpich" || job.Addr != "h:1" || job.Listener != nil {
			t.Errorf("Detect = %+v", job)
		}
	})
	t.Run("other ranks ignore the fd", func(t *testing.T) {
		setEnv(t, map[string]string{"COURIER_RANK": "1", "COURIER_SIZE": "2", "COURIER_RENDEZVOUS_FD": "3"})
		job, err := Detect()
		if err != nil || job.Listener != nil {
			t.Errorf("Detect = %+v, %v; want no listener, no error", job, err)
		}
	})
	t.Run("bad env", func(t *testing.T) {
		setEnv(t, map[string]string{"COURIER_RANK": "1"})
		if _, err := Detect(); !errors.Is(err, ErrBadEnv) {
			t.Errorf("Detect error = %v, want ErrBadEnv", err)
		}
	})

	file, err := os.CreateTemp(t.TempDir(), "notasocket")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, fd := range map[string]string{
		"not a number":       "three",
		"negative":           "-3",
		"not open":           strconv.Itoa(1 << 20),
		"not a socket":       strconv.Itoa(dupFD(t, file)),
		"not a listening fd": "",
	} {
		t.Run(name, func(t *testing.T) {
			if fd == "" {
				c1, c2 := socketPair(t)
				defer c1.Close()
				defer c2.Close()
				f, err := c1.(*net.UnixConn).File()
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				fd = strconv.Itoa(dupFD(t, f))
			}
			setEnv(t, map[string]string{"COURIER_RANK": "0", "COURIER_SIZE": "2", "COURIER_RENDEZVOUS_FD": fd})
			job, err := Detect()
			if err == nil {
				job.Listener.Close()
				t.Fatalf("Detect with COURIER_RENDEZVOUS_FD=%s succeeded", fd)
			}
			if !errors.Is(err, ErrBadEnv) || !strings.Contains(err.Error(), "COURIER_RENDEZVOUS_FD") {
				t.Errorf("error %q: want ErrBadEnv naming COURIER_RENDEZVOUS_FD", err)
			}
		})
	}
}

// socketPair returns two connected Unix sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}
