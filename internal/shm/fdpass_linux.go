package shm

import (
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// SendFds writes msg to c with the descriptors fds attached (SCM_RIGHTS):
// the receiving process gets its own descriptors for the same files. The
// caller keeps its fds and may close them once SendFds returns.
//
// Descriptors travel with the message's first byte, so msg must not be
// empty when fds are given; on a stream socket the rest of msg may follow
// in further writes. It honours c's write deadline. At most MaxFds
// descriptors travel in one message.
func SendFds(c *net.UnixConn, msg []byte, fds ...int) error {
	if len(fds) > MaxFds {
		return fmt.Errorf("shm: sending %d descriptors: at most %d travel in one message", len(fds), MaxFds)
	}
	if len(fds) > 0 && len(msg) == 0 {
		return fmt.Errorf("shm: sending %d descriptors with an empty message: at least one byte must carry them", len(fds))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("shm: sending %d bytes and %d descriptors: %w", len(msg), len(fds), err)
	}
	if oobn != len(oob) {
		return fmt.Errorf("shm: sending %d descriptors: only %d of %d control bytes went", len(fds), oobn, len(oob))
	}
	if n < len(msg) { // a stream socket took part of it; the descriptors went with that part
		if _, err := c.Write(msg[n:]); err != nil {
			return fmt.Errorf("shm: sending the last %d of %d bytes: %w", len(msg)-n, len(msg), err)
		}
	}
	return nil
}

// oobMax is room for the control message of MaxFds descriptors.
const oobMax = (MaxFds*4 + 16 + 7) &^ 7

// RecvFds reads one message from c into msg, with the descriptors
// attached to it, at most maxFds of them (0 to MaxFds). It returns the
// bytes read (on a stream socket, a read ends where descriptors are
// attached, but a message SendFds wrote may arrive in several reads) and
// the descriptors received, which belong to the caller and are
// close-on-exec (MSG_CMSG_CLOEXEC), so a child the process starts later
// does not inherit them.
//
// A message that carried more than maxFds descriptors is an error: the
// kernel closes those that did not fit, RecvFds closes the rest and
// returns none. The end of the stream is io.EOF. It honours c's read
// deadline: a passed deadline is an error matching os.ErrDeadlineExceeded.
func RecvFds(c *net.UnixConn, msg []byte, maxFds int) (n int, fds []int, err error) {
	if maxFds < 0 || maxFds > MaxFds {
		return 0, nil, fmt.Errorf("shm: receiving at most %d descriptors: not in [0, %d]", maxFds, MaxFds)
	}
	var buf [oobMax]byte
	var oob []byte
	if maxFds > 0 {
		oob = buf[:unix.CmsgSpace(4*maxFds)]
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, nil, fmt.Errorf("shm: receiving descriptors: %w", err)
	}
	var oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), msg, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, nil, fmt.Errorf("shm: receiving a message with descriptors: %w", err)
	}
	if oobn > 0 {
		fds, err = parseRights(oob[:oobn])
	}
	switch {
	case err != nil:
	case flags&unix.MSG_CTRUNC != 0 || len(fds) > maxFds:
		err = fmt.Errorf("shm: a message carried more than the %d descriptors asked for: all closed", maxFds)
	case flags&unix.MSG_TRUNC != 0:
		err = fmt.Errorf("shm: a message longer than the %d-byte buffer: descriptors closed", len(msg))
	case n == 0 && len(fds) == 0 && len(msg) > 0:
		return 0, nil, io.EOF
	default:
		return n, fds, nil
	}
	closeAll(fds)
	return n, nil, err
}

// parseRights returns the descriptors in the control messages oob. On an
// error it closes those it found.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("shm: parsing control messages: %w", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("shm: parsing SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
