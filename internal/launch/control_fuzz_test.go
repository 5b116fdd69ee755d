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
