//go:build unix && !mpi

package bootstrap

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestInheritedListenerLeases: each lease on the inherited socket
// accepts until it is closed, Close ends a pending Accept at once, and the
// socket goes on listening: a connection made between two leases is the
// next lease's.
func TestInheritedListenerLeases(t *testing.T) {
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
	ln.Close() // only the inherited descriptor listens now
	fd := dupFD(t, f)
	addr := ln.Addr().String()

	first, err := inheritedListener(fd)
	if err != nil {
		t.Fatal(err)
	}
	if first.Addr().String() != addr {
		t.Errorf("lease on %s, want %s", first.Addr(), addr)
	}
	c1 := dialT(t, addr)
	a1, err := first.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a1.Close()
	c1.Close()

	// Close ends a pending Accept promptly.
	accepted := make(chan error, 1)
	go func() {
		c, err := first.Accept()
		if c != nil {
			c.Close()
		}
		accepted <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	first.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v to end Accept", d)
	}
	if _, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on a closed lease = %v", err)
	}

	// Between leases the socket still listens; the next lease takes the
	// connection.
	c2 := dialT(t, addr)
	defer c2.Close()
	second, err := inheritedListener(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	a2, err := second.Accept()
	if err != nil {
		t.Fatalf("the second lease: %v", err)
	}
	a2.Close()
}

func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
