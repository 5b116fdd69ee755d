package launch

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// FuzzControl plays a rank's side of the control channel with arbitrary
// bytes: courier run's reader never panics, ends once the rank's side
// does (or at the first line that is not the protocol), hands on no
// report larger than its bound, only whole reports, and no more than the
// rank sent; ControlHello marks the rank as listening.
func FuzzControl(f *testing.F) {
	report := func(text, waits string) string {
		return fmt.Sprintf("report %d\n%swaits %d\n%s", len(text), text, len(waits), waits)
	}
	f.Add(ControlHello + report("comm 0: Recv from 1 tag 5\n", "1\trecv\t5\tRecv from 1 tag 5 (called at /a/b.go:3 in main.main)\n"))
	f.Add(ControlHello + "stuck\n" + report("", "") + report("x", "-1\trecv\t0\tany\n"))
	f.Add("report 99999999999\n")
	f.Add("report -1\n")
	f.Add("report 3\nabcwaits 2\n")
	f.Add("GET / HTTP/1.1\r\n\r\n")
	f.Fuzz(func(t *testing.T, data string) {
		a, b := net.Pipe()
		reports := make(chan rankReport, 1+strings.Count(data, "report"))
		stuck := make(chan int, 1)
		c := &control{conn: a, reports: reports, stuck: stuck, rank: 3, done: make(chan struct{})}
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			b.Write([]byte(data))
			b.Close()
		}()
		c.serve()
		a.Close() // a writer the reader gave up on ends here
		<-wrote
		if c.listening.Load() && !strings.Contains(data, ControlHello) {
			t.Fatal("listening without the rank's hello")
		}
		if len(stuck) > 0 && !strings.Contains(data, "stuck\n") {
			t.Fatal("a rank asked for the job's report without saying stuck")
		}
		close(reports)
		total := 0
		for r := range reports {
			if r.rank != 3 {
				t.Fatalf("a report of rank %d from rank 3's channel", r.rank)
			}
			if len(r.text) > maxReport {
				t.Fatalf("a report of %d bytes passed the bound of %d", len(r.text), maxReport)
			}
			if !strings.Contains(data, r.text) {
				t.Fatalf("report %q is not in what the rank sent", r.text)
			}
			if len(r.waits) > strings.Count(data, "\t") {
				t.Fatalf("%d waits from %d tabs", len(r.waits), strings.Count(data, "\t"))
			}
			total += len(r.text)
		}
		if total > len(data) {
			t.Fatalf("%d bytes of reports from %d bytes", total, len(data))
		}
	})
}

// FuzzWaitGraph draws the wait-for graph of arbitrary "waits" answers
// (one per rank, split at form feeds) of a job of up to 9 ranks: it
// never panics, has lines only when some rank waits for another rank of
// the job, and its edges are ranks of the job.
func FuzzWaitGraph(f *testing.F) {
	f.Add("1\tsend\t5\tSend to 1 tag 5\n\f0\tsend\t5\tSend to 0 tag 5\n", uint8(2))
	f.Add("1\trecv\t0\tRecv\n\f2\tallreduce\t-1\tAllreduce\n\f0\tbarrier\t-1\tBarrier (called at /x/y.go:9 in main.f)\n", uint8(3))
	f.Add("-1\trecv\t0\tany\n\f\f7\trecv\t1\tx\n", uint8(3))
	f.Add("9999999999999999999999\trecv\t0\tx\n", uint8(1))
	f.Fuzz(func(t *testing.T, data string, size uint8) {
		n := int(size%9) + 1
		waits := map[int][]wait{}
		edge := false
		for r, s := range strings.Split(data, "\f") {
			waits[r] = parseWaits(s)
			for _, w := range waits[r] {
				if strings.ContainsAny(w.op, "\t\n") {
					t.Fatalf("a wait's operation %q holds a separator", w.op)
				}
				edge = edge || (r < n && w.peer >= 0 && w.peer < n && w.peer != r)
			}
		}
		lines := waitGraph(n, waits)
		if (len(lines) > 0) != edge {
			t.Fatalf("%d lines of graph for a job with edges %v: %q", len(lines), edge, lines)
		}
		if len(lines) > 1+n+n*n {
			t.Fatalf("%d lines for %d ranks", len(lines), n)
		}
		if len(lines) == 0 {
			return
		}
		head, ok := strings.CutPrefix(lines[0], "wait-for graph: ")
		if !ok {
			t.Fatalf("the graph's first line is %q", lines[0])
		}
		for _, e := range strings.Split(head, ", ") {
			var from, to int
			if _, err := fmt.Sscanf(e, "%d→%d", &from, &to); err != nil || from < 0 || from >= n || to < 0 || to >= n || from == to {
				t.Fatalf("edge %q in a job of %d ranks", e, n)
			}
		}
	})
}
