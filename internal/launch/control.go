package launch

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/internal/waitgraph"
)

// EnvControlFD names the inherited descriptor of a rank's control
// channel: one end of a socket pair whose other end courier run holds.
// Over it courier run asks a rank, when the job times out or is
// interrupted, for the operations pending on it (mp answers: mp/control.go),
// and prints every rank's answer together before it stops them. No signal
// is sent for this, so the program's signal handling is untouched.
//
// The protocol, in lines: the rank says ControlHello once it has a
// communicator open; courier run says "report"; the rank answers
// "report N" and N bytes of text, then "waits M" and M bytes of lines
// "peer<TAB>op<TAB>tag<TAB>description", one per pending operation of its
// world communicators (peer -1: any rank), of which courier run draws the
// wait-for graph (internal/waitgraph). A rank whose wait passed its
// COURIER_TIMEOUT says "stuck" before it aborts: courier run then asks
// every rank (once per job) and says "reported" to it when it has printed
// the answers.
const EnvControlFD = "COURIER_CONTROL_FD"

// ControlHello is a rank's first line on its control channel.
const ControlHello = "courier control 1\n"

// ReportWait bounds how long courier run waits for the ranks' reports.
const ReportWait = 2 * time.Second

// maxReport bounds one rank's report, so that a rank cannot grow the
// launcher without bound.
const maxReport = 1 << 20

// control is courier run's end of one rank's control channel.
type control struct {
	conn      net.Conn
	listening atomic.Bool // the rank said ControlHello
	reports   chan<- rankReport
	stuck     chan<- int // a rank whose wait timed out asks for the job's report
	rank      int
	done      chan struct{}
}

// rankReport is one rank's answer.
type rankReport struct {
	rank  int
	text  string
	waits []waitgraph.Wait
}

// newControl makes rank i's control channel: courier run's end, and the
// file the rank inherits (to be closed once it has started). It returns
// nils where the system has none (then the rank just has no channel).
func newControl(i int, reports chan<- rankReport, stuck chan<- int) (*control, *os.File) {
	mine, theirs, err := socketPair()
	if err != nil {
		return nil, nil
	}
	defer mine.Close() // FileConn has its own duplicate
	conn, err := net.FileConn(mine)
	if err != nil {
		theirs.Close()
		return nil, nil
	}
	return &control{conn: conn, reports: reports, stuck: stuck, rank: i, done: make(chan struct{})}, theirs
}

// serve reads the rank's side until it closes (the rank ended) or close
// is called.
func (c *control) serve() {
	defer close(c.done)
	r := bufio.NewReader(c.conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if line == ControlHello {
			c.listening.Store(true)
			continue
		}
		if line == "stuck\n" {
			select {
			case c.stuck <- c.rank:
			default: // the launcher has one such request of this rank already
			}
			continue
		}
		n, ok := strings.CutPrefix(strings.TrimSpace(line), "report ")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 0 || size > maxReport {
			return // not courier's protocol: stop listening
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return
		}
		line, err = r.ReadString('\n')
		n, ok = strings.CutPrefix(strings.TrimSpace(line), "waits ")
		wsize, werr := strconv.Atoi(n)
		if err != nil || !ok || werr != nil || wsize < 0 || wsize > maxReport {
			return
		}
		w := make([]byte, wsize)
		if _, err := io.ReadFull(r, w); err != nil {
			return
		}
		select { // one answer per request, so room for it; never block
		case c.reports <- rankReport{c.rank, string(b), waitgraph.Parse(string(w))}:
		default:
		}
	}
}

// close ends the channel and waits for serve.
func (c *control) close() {
	c.conn.Close()
	<-c.done
}

// collectReports asks every running rank that listens for its report,
// waits for the answers (at most ReportWait), and writes them together
// to Stderr, each line prefixed by its rank. It returns how many ranks
// answered.
func (j *job) collectReports(ranks []*rank, reports <-chan rankReport, why string) int {
	asked := 0
	for _, r := range ranks {
		if r != nil && r.running && r.ctl != nil && r.ctl.listening.Load() {
			if _, err := r.ctl.conn.Write([]byte("report\n")); err == nil {
				asked++
			}
		}
	}
	if asked == 0 {
		return 0
	}
	got := make(map[int]string, asked)
	waits := make(map[int][]waitgraph.Wait, asked)
	t := time.NewTimer(ReportWait)
	defer t.Stop()
wait:
	for len(got) < asked {
		select {
		case rep := <-reports:
			got[rep.rank] = rep.text
			waits[rep.rank] = rep.waits
		case <-t.C:
			break wait
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%swhat the ranks were waiting for (%s):\n", MessagePrefix, why)
	for i := range ranks {
		text, ok := got[i]
		if !ok {
			if r := ranks[i]; r != nil && r.running && r.ctl != nil && r.ctl.listening.Load() {
				fmt.Fprintf(&b, "[%d] (no answer within %v)\n", i, ReportWait)
			}
			continue
		}
		for line := range strings.Lines(text) {
			fmt.Fprintf(&b, "[%d] %s\n", i, strings.TrimSuffix(line, "\n"))
		}
	}
	for _, line := range waitgraph.Describe(len(ranks), waits) {
		b.WriteString(MessagePrefix + line + "\n")
	}
	if j.out.stderr != nil {
		j.out.write(j.out.stderr, []byte(b.String()))
	}
	return len(got)
}
