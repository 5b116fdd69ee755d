package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdConn is a link's TCP connection on a descriptor of the link's own,
// outside the Go runtime's netpoller.
//
// Why: a rank process whose GOMAXPROCS leaves Ps idle keeps a thread
// parked in the netpoller's epoll, and every segment that arrives on a
// socket registered there wakes it, even while the goroutine that wants
// the data is polling the socket itself (engine.Poller). On virtual
// machines that wake-up is paid inside the sender's writev, on the
// message's critical path: with GOMAXPROCS 16 against 1, a one-way TCP
// message took 6.97 against 6.17 µs on the 16-core host, an 8-byte
// Allreduce on 8 ranks 52.4 against 46.4 (docs/benchmarks.md, "Ranks that
// fill the cores"). A descriptor outside the netpoller wakes nobody: a
// goroutine that must sleep until it can read or write waits in poll(2)
// on that descriptor alone, and only then.
//
// newFDConn duplicates the connection's descriptor and closes the
// net.Conn, which removes the original from the netpoller (the socket
// lives on in the duplicate). Reads and writes are non-blocking system
// calls; a goroutine that must wait arms the socket in its side's epoll
// instance (waitSide), which is in the netpoller, and parks there, so
// deadlines and Close wake it as they would a net.Conn's. The descriptor
// is closed when Close has been called and the last operation under way
// has returned, so no operation ever uses a number the process has
// reused.
type fdConn struct {
	fd           int
	refs         atomic.Int32 // 1 for the open connection, +1 per operation under way
	closing      atomic.Bool
	laddr, raddr net.Addr
	rd, wr       waitSide      // the reading and the writing side's waits
	iov          [2]unix.Iovec // writev's, under the link's wmu
}

// waitSide is how one direction of an fdConn sleeps: an epoll instance
// of its own holding the socket, armed (EPOLLONESHOT) only by a goroutine
// about to sleep, and itself registered in the runtime's netpoller (an
// *os.File), so that the sleeping goroutine parks there like any other,
// holding no thread. A socket that is not armed wakes nothing when data
// comes.
//
// One goroutine at a time waits on a side (the reader goroutine on the
// reading side; the writing side's waits run under the link's wmu), so a
// side's prebuilt functions and their results need no lock, and a wait
// allocates nothing.
type waitSide struct {
	f      *os.File // the epoll instance, in the netpoller
	rc     syscall.RawConn
	events uint32 // what arming waits for
	ev     [1]unix.EpollEvent
	check  func(fd uintptr) bool // takes the instance's event, if any
	arm    func(fd uintptr)      // arms the socket; its error in armErr
	armErr error
}

// newFDConn moves tc onto a descriptor of its own, or returns tc's error
// (tc is then left as it was).
func newFDConn(tc *net.TCPConn) (*fdConn, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	var derr error
	if cerr := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil {
		return nil, cerr
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	c := &fdConn{fd: nfd, laddr: tc.LocalAddr(), raddr: tc.RemoteAddr()}
	c.refs.Store(1)
	if err := c.rd.init(nfd, unix.EPOLLIN|unix.EPOLLRDHUP, "courier-tcp-read"); err != nil {
		unix.Close(nfd)
		return nil, err
	}
	if err := c.wr.init(nfd, unix.EPOLLOUT, "courier-tcp-write"); err != nil {
		c.rd.f.Close()
		unix.Close(nfd)
		return nil, err
	}
	tc.Close() // the runtime forgets its descriptor; the socket stays open in ours
	return c, nil
}

// init makes the side's epoll instance, with sock in it unarmed, and puts
// the instance in the runtime's netpoller.
func (w *waitSide) init(sock int, events uint32, name string) error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(sock)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sock, &ev); err != nil {
		unix.Close(ep)
		return os.NewSyscallError("epoll_ctl", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return os.NewSyscallError("fcntl", err)
	}
	w.events = events
	w.f = os.NewFile(uintptr(ep), name)
	if w.rc, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return err
	}
	w.arm = func(ep uintptr) {
		ev := unix.EpollEvent{Events: w.events | unix.EPOLLONESHOT, Fd: int32(sock)}
		w.armErr = unix.EpollCtl(int(ep), unix.EPOLL_CTL_MOD, sock, &ev)
	}
	// The instance is readable once the armed socket is ready: take the
	// event (so the instance is quiet again) without blocking.
	w.check = func(ep uintptr) bool {
		n, err := unix.EpollWait(int(ep), w.ev[:], 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	}
	return nil
}

// acquire counts an operation under way; false once Close has begun.
func (c *fdConn) acquire() bool {
	for {
		n := c.refs.Load()
		if n <= 0 || c.closing.Load() {
			return false
		}
		if c.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release ends an operation (or, from Close, the connection's own count):
// the last one closes the descriptor.
func (c *fdConn) release() {
	if c.refs.Add(-1) == 0 {
		unix.Close(c.fd)
	}
}

func (c *fdConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.laddr, Addr: c.raddr, Err: err}
}

// wait sleeps until the descriptor is ready for w's events, the
// deadline passes, or Close begins. Under an acquired reference.
func (c *fdConn) wait(w *waitSide, op string) error {
	if c.closing.Load() {
		return c.opError(op, net.ErrClosed)
	}
	// Armed now, the socket's readiness, even if it came before, queues
	// one event on the instance: no wake-up is lost.
	// (Inside Control, which keeps the instance's descriptor from being
	// closed meanwhile.)
	if err := w.rc.Control(w.arm); err != nil {
		return c.opError(op, net.ErrClosed)
	}
	if err := w.armErr; err != nil {
		w.armErr = nil
		return c.opError(op, os.NewSyscallError("epoll_ctl", err))
	}
	if err := w.rc.Read(w.check); err != nil {
		if errors.Is(err, os.ErrClosed) {
			err = net.ErrClosed
		}
		return c.opError(op, err)
	}
	return nil
}

// Read implements net.Conn.
func (c *fdConn) Read(p []byte) (int, error) {
	if !c.acquire() {
		return 0, c.opError("read", net.ErrClosed)
	}
	defer c.release()
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := rawRead(uintptr(c.fd), p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if werr := c.wait(&c.rd, "read"); werr != nil {
				return 0, werr
			}
			continue
		case err != nil:
			return 0, c.opError("read", os.NewSyscallError("read", err))
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write implements net.Conn: all of p, or an error. Each write(2) is a
// raw system call, as writev's are (writev says why).
func (c *fdConn) Write(p []byte) (int, error) {
	if !c.acquire() {
		return 0, c.opError("write", net.ErrClosed)
	}
	defer c.release()
	done := 0
	for done < len(p) {
		r, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(c.fd), uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
		if errno == 0 {
			done += int(r)
		}
		switch errno {
		case 0, unix.EINTR:
		case unix.EAGAIN:
			if werr := c.wait(&c.wr, "write"); werr != nil {
				return done, werr
			}
		default:
			return done, c.opError("write", os.NewSyscallError("write", errno))
		}
	}
	return done, nil
}

// writev writes a and then b, in as few system calls as the socket
// allows (one, when it takes both): all of them, or an error. Under the
// link's wmu, which guards c.iov.
func (c *fdConn) writev(a, b []byte) error {
	if !c.acquire() {
		return c.opError("write", net.ErrClosed)
	}
	defer c.release()
	for len(a)+len(b) > 0 {
		iov := c.iov[:0]
		for _, p := range [2][]byte{a, b} {
			if len(p) > 0 {
				v := unix.Iovec{Base: &p[0]}
				v.SetLen(len(p))
				iov = append(iov, v)
			}
		}
		// Every write is a raw system call, as the reads are
		// (sysIO.init): the socket is non-blocking, so the call never
		// waits. As an ordinary call, the runtime's monitor (sysmon)
		// finds the P in a system call whenever the thread is held there
		// past its tick (a large message's kernel copy takes 0.1-1 ms; a
		// small write on a loaded machine is descheduled as it wakes the
		// reader), and, in a rank of one P, hands the P to another
		// thread and keeps waking every 20 µs, taking the cores from the
		// ranks where ranks fill them. Large writes went raw first: on 4
		// ranks over 2 cores, Allgather of 16 MiB 18.8-20.3 ms against
		// 20.6-22.5, Allreduce 37.8-38.4 against 40.4-43.9
		// (docs/benchmarks.md, "TCP's large writes as raw system
		// calls"). Then the small ones: a loop of 8-byte Bcasts on 4
		// ranks over 2 cores woke sysmon 6,000-7,000 times a run (as
		// many context switches as all of Open MPI's ranks made), and as
		// raw calls 1,200-4,600; Bcast 10.0 µs a call against 14.1,
		// Allreduce 57.9 against 72.8 ("TCP's small writes as raw system
		// calls"). An ordinary call also let a rank's other goroutines
		// have its one P while it wrote; a waiter now yields the P when
		// it finds another goroutine reading its link (link.pollRead).
		r, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(c.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		n := int(r)
		if errno != 0 {
			n = 0
		}
		k := min(n, len(a))
		a, b = a[k:], b[n-k:]
		switch errno {
		case 0, unix.EINTR:
		case unix.EAGAIN:
			if werr := c.wait(&c.wr, "write"); werr != nil {
				return werr
			}
		default:
			return c.opError("write", os.NewSyscallError("writev", errno))
		}
	}
	return nil
}

// Close implements net.Conn: it shuts the socket down (ending every wait
// on it), and the descriptor is closed once no operation uses it.
func (c *fdConn) Close() error {
	if c.closing.Swap(true) {
		return nil
	}
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	c.rd.f.Close() // wakes a goroutine parked on either side
	c.wr.f.Close()
	c.release()
	return nil
}

// CloseWrite shuts down the writing side (the peer reads the end).
func (c *fdConn) CloseWrite() error {
	if !c.acquire() {
		return c.opError("close", net.ErrClosed)
	}
	defer c.release()
	if err := unix.Shutdown(c.fd, unix.SHUT_WR); err != nil {
		return c.opError("close", os.NewSyscallError("shutdown", err))
	}
	return nil
}

// LocalAddr implements net.Conn.
func (c *fdConn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr implements net.Conn.
func (c *fdConn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline implements net.Conn: a goroutine parked in a wait sees
// the new deadline at once (the netpoller's own deadlines bound it).
func (c *fdConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *fdConn) SetReadDeadline(t time.Time) error { return c.rd.f.SetReadDeadline(t) }

// SetWriteDeadline implements net.Conn.
func (c *fdConn) SetWriteDeadline(t time.Time) error { return c.wr.f.SetReadDeadline(t) }

// SyscallConn implements syscall.Conn, for the reader's system calls.
func (c *fdConn) SyscallConn() (syscall.RawConn, error) { return fdRaw{c}, nil }

// fdRaw is fdConn's syscall.RawConn.
type fdRaw struct{ c *fdConn }

// Control implements syscall.RawConn.
func (r fdRaw) Control(f func(fd uintptr)) error {
	if !r.c.acquire() {
		return r.c.opError("raw-control", net.ErrClosed)
	}
	defer r.c.release()
	f(uintptr(r.c.fd))
	return nil
}

// Read implements syscall.RawConn: f until it reports done, waiting for
// the socket to be readable between calls.
func (r fdRaw) Read(f func(fd uintptr) bool) error { return r.until(f, &r.c.rd, "raw-read") }

// Write implements syscall.RawConn: f until it reports done, waiting for
// the socket to be writable between calls.
func (r fdRaw) Write(f func(fd uintptr) bool) error { return r.until(f, &r.c.wr, "raw-write") }

// until calls f until it reports done, waiting on side w between calls.
func (r fdRaw) until(f func(fd uintptr) bool, w *waitSide, op string) error {
	if !r.c.acquire() {
		return r.c.opError(op, net.ErrClosed)
	}
	defer r.c.release()
	for !f(uintptr(r.c.fd)) {
		if err := r.c.wait(w, op); err != nil {
			return err
		}
	}
	return nil
}

// ownConn moves a link's TCP connection off the netpoller (fdConn); other
// connections, and one whose descriptor cannot be duplicated, stay as
// they are.
func ownConn(nc net.Conn) net.Conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		if fc, err := newFDConn(tc); err == nil {
			return fc
		}
	}
	return nc
}

// readySet is how a communicator's waiters find which of its links have
// something to read in one system call: ppoll(2) over their descriptors
// with a zero timeout. Without it a waiter's every poll reads each link's
// socket in turn, one read(2) each, most of which find nothing; with
// eight ranks that was seven system calls a poll, each taking the
// socket's lock, before the one link a reply comes on was looked at.
type readySet struct {
	mu  sync.Mutex    // one poller at a time uses fds (the others read every link)
	fds []unix.PollFd // one per link, in the poller's order
}

// readyMin is the fewest links for which a readySet pays: with one, a
// read that finds nothing costs what ppoll does.
const readyMin = 2

// newReadySet returns the ready set of links, or nil when there are too
// few or one of them is not on a descriptor of its own (fdConn).
func newReadySet(links []*link) *readySet {
	if len(links) < readyMin {
		return nil
	}
	s := &readySet{fds: make([]unix.PollFd, len(links))}
	for i, l := range links {
		c, ok := l.nc.(*fdConn)
		if !ok {
			return nil
		}
		s.fds[i] = unix.PollFd{Fd: int32(c.fd), Events: unix.POLLIN}
	}
	return s
}

// poll reads the links whose socket has something to read (or has
// ended, or failed), runs every link's queued writer jobs, and reports
// whether it did anything; ok is false when another goroutine holds the
// set, or ppoll failed: the caller then polls every link. A
// descriptor already closed (the link ended) shows as ready, and its
// link's poll, which reads through the connection, finds it closed.
func (s *readySet) poll(links []*link) (did, ok bool) {
	if !s.mu.TryLock() {
		return false, false
	}
	defer s.mu.Unlock()
	var ts unix.Timespec
	_, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&s.fds[0])), uintptr(len(s.fds)),
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 {
		return false, false
	}
	for i, l := range links {
		if s.fds[i].Revents != 0 && l.pollRead() {
			did = true
		}
		if l.pollWrite() {
			did = true
		}
	}
	return did, true
}
