package mp

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The launcher's control channel. courier run gives every rank one end of
// a socket pair as an inherited descriptor, named by COURIER_CONTROL_FD,
// and asks on it, when the job times out (courier run --timeout) or is
// interrupted (Ctrl-C), for the operations pending on the rank, which it
// prints together before it stops the ranks. No signal is involved: the
// program's own signal handling is left as it is. A process that is not
// under courier run (the variable unset) has no channel.
//
// The protocol, in lines: the rank says controlHello once when its first
// communicator opens; courier run says "report"; the rank answers
// "report N" and N bytes: the pending-operation lists of its open
// communicators (pendingBlock each), then "waits M" and M bytes of lines
// "peer<TAB>op<TAB>tag<TAB>description", one per pending operation of its
// world communicators (peer -1: any rank), from which courier run draws
// the wait-for graph of the job. internal/launch speaks the other end.
// A rank whose wait passed its timeout says "stuck" before it aborts its
// communicator; courier run then asks every rank for its report, prints
// them, and says "reported" to the ranks that asked (reportJob), so the
// job's report shows every rank's operations, not only the first to time
// out. A goroutine reads the channel while a communicator is open.

// controlEnv names the variable of the control channel's descriptor.
const controlEnv = "COURIER_CONTROL_FD"

// controlHello is the rank's first line on the control channel.
const controlHello = "courier control 1\n"

// control is the process's end of the control channel.
var control struct {
	mu      sync.Mutex
	opened  bool // the descriptor has been looked at
	conn    net.Conn
	r       *bufio.Reader
	running bool
	done    chan struct{}
	ack     chan struct{} // courier run has printed the reports a rank asked for
}

// startControl starts reading the control channel, when the process has
// one and no goroutine reads it yet. Not under reports.mu.
func startControl() {
	control.mu.Lock()
	defer control.mu.Unlock()
	if !control.opened {
		control.opened = true
		control.conn = openControl(os.Getenv(controlEnv))
		if control.conn != nil {
			control.r = bufio.NewReader(control.conn)
			control.ack = make(chan struct{}, 1)
			if _, err := control.conn.Write([]byte(controlHello)); err != nil {
				control.conn.Close()
				control.conn = nil
			}
		}
	}
	if control.conn == nil || control.running {
		return
	}
	control.conn.SetReadDeadline(time.Time{})
	control.running = true
	control.done = make(chan struct{})
	go serveControl(control.conn, control.r, control.done, control.ack)
}

// stopControl stops the reading goroutine when no communicator is open
// (and waits for it). Not under reports.mu.
func stopControl() {
	control.mu.Lock()
	defer control.mu.Unlock()
	if !control.running || len(openComms()) > 0 {
		return
	}
	control.conn.SetReadDeadline(time.Unix(1, 0))
	<-control.done
	control.running = false
}

// openControl returns the connection of the inherited descriptor fd
// names, or nil when there is none.
func openControl(fd string) net.Conn {
	n, err := strconv.Atoi(strings.TrimSpace(fd))
	if err != nil || n < 3 {
		return nil
	}
	f := os.NewFile(uintptr(n), "courier-control")
	if f == nil {
		return nil
	}
	defer f.Close() // FileConn has its own (close-on-exec) duplicate
	conn, err := net.FileConn(f)
	if err != nil {
		return nil
	}
	return conn
}

// serveControl answers the launcher's requests until the channel ends,
// or until stopControl's deadline.
func serveControl(conn net.Conn, r *bufio.Reader, done, ack chan struct{}) {
	defer close(done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				conn.Close() // the launcher is gone: no more requests
			}
			return
		}
		switch strings.TrimSpace(line) {
		case "report":
		case "reported":
			select {
			case ack <- struct{}{}:
			default:
			}
			continue
		default:
			continue
		}
		if _, err := conn.Write(encodeAnswer(processReport(), processWaits(), math.MaxInt)); err != nil {
			conn.Close()
			return
		}
	}
}

// controlAckWait bounds how long a rank whose wait timed out waits for
// courier run to have printed every rank's report (courier run waits up
// to 2s for the answers).
const controlAckWait = 3 * time.Second

// reportJob asks courier run, when this process runs under it, to print
// every rank's pending operations now, and waits until it has (at most
// controlAckWait): a wait that passed its timeout calls it before it
// aborts the communicator, which would end the other ranks' operations
// with this one before they could be listed. It reports whether courier
// run said it has printed them.
func reportJob() bool {
	control.mu.Lock()
	conn, ack, running := control.conn, control.ack, control.running
	control.mu.Unlock()
	if conn == nil || !running {
		return false
	}
	select { // an answer to an earlier request
	case <-ack:
	default:
	}
	if _, err := conn.Write([]byte("stuck\n")); err != nil {
		return false
	}
	t := time.NewTimer(controlAckWait)
	defer t.Stop()
	select {
	case <-ack:
		return true
	case <-t.C:
		return false
	}
}

// processWaits lists the pending operations of the world communicators
// open in this process, in the control channel's "waits" form.
func processWaits() string {
	var b strings.Builder
	for _, c := range openComms() {
		if c.parent != nil {
			continue // its ranks are not the job's
		}
		c.writeWaits(&b)
	}
	return b.String()
}

// writeWaits writes the "waits" lines of c's pending operations.
func (c *Comm) writeWaits(b *strings.Builder) {
	for _, p := range c.conn.Pending() {
		peer := p.Peer
		if peer < 0 {
			peer = -1
		}
		desc := strings.NewReplacer("\t", " ", "\n", " ").Replace(c.describeOp(p))
		op := strings.NewReplacer("\t", " ", "\n", " ").Replace(c.waitOp(p))
		fmt.Fprintf(b, "%d\t%s\t%d\t%s\n", peer, op, p.Tag, desc)
	}
}

// processReport lists the pending operations of every communicator open
// in this process.
func processReport() string {
	comms := openComms()
	if len(comms) == 0 {
		return "no communicator open\n"
	}
	var b strings.Builder
	for _, c := range comms {
		b.WriteString(c.pendingBlock())
	}
	return b.String()
}
