package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/courier-mp/courier/internal/bench"
)

// checkSVG fails unless b is well-formed XML whose root is an svg element.
func checkSVG(t *testing.T, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
}

func TestSVG(t *testing.T) {
	series := []bench.Series{
		{Label: "courier <tcp> & co", Courier: true, Latency: map[int]float64{1: 20, 4096: 22, 1 << 20: 700},
			Bandwidth: map[int]float64{4096: 0.3, 1 << 20: 2.5}, Coll: map[string]map[int]float64{"allreduce": {8: 280, 1 << 20: 4300}}},
		{Label: "Open MPI TCP", Latency: map[int]float64{1: 5, 4096: 7, 1 << 20: 160, 0: 4},
			Bandwidth: map[int]float64{4096: 0.8, 1 << 20: 0}, Coll: map[string]map[int]float64{"bcast": {8: 10}}},
	}
	var b bytes.Buffer
	if err := SVG(&b, "2 ranks", series); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes())
	out := b.String()
	for _, want := range []string{"courier &lt;tcp&gt; &amp; co", "Open MPI TCP", "2 ranks: one-way latency", "bandwidth", "allreduce, time per call", "bcast, time per call", "1 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}

func TestSVGNothing(t *testing.T) {
	series := []bench.Series{{Label: "zero", Latency: map[int]float64{1: 0, 0: 5}}}
	if err := SVG(io.Discard, "", series); err == nil || !strings.Contains(err.Error(), "nothing to plot") {
		t.Errorf("no positive figure: %v", err)
	}
}

// One point, or equal figures, still make an axis with labelled ticks.
func TestSVGOnePoint(t *testing.T) {
	series := []bench.Series{{Label: "one", Bandwidth: map[int]float64{65536: 1.8}}}
	var b bytes.Buffer
	if err := SVG(&b, "", series); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes())
	if !strings.Contains(b.String(), "64 KiB") || !strings.Contains(b.String(), ">2<") {
		t.Errorf("ticks missing:\n%s", b.String())
	}
}

func TestTicks(t *testing.T) {
	labels := func(ts []plot.Tick) []string {
		var out []string
		for _, t := range ts {
			if t.Label != "" {
				out = append(out, t.Label)
			}
		}
		return out
	}
	if got := strings.Join(labels(sizeTicks{}.Ticks(1, 64<<20)), ","); got != "1 B,16 B,256 B,4 KiB,64 KiB,1 MiB,16 MiB" {
		t.Errorf("size ticks over 1 B-64 MiB: %s", got)
	}
	if got := strings.Join(labels(sizeTicks{}.Ticks(1000, 70000)), ","); got != "1 KiB,2 KiB,4 KiB,8 KiB,16 KiB,32 KiB,64 KiB" {
		t.Errorf("size ticks over 1000-70000 B: %s", got)
	}
	if got := strings.Join(labels(valueTicks{}.Ticks(0.3, 40)), ","); got != "0.5,1,2,5,10,20" {
		t.Errorf("value ticks over 0.3-40: %s", got)
	}
	if got := strings.Join(labels(valueTicks{}.Ticks(0.3, 3e6)), ","); got != "1,10,100,1000,10000,100000,1e6" {
		t.Errorf("value ticks over 0.3-3e6: %s", got)
	}
	if got := strings.Join(labels(valueTicks{}.Ticks(11, 35)), ","); got != "20,30" {
		t.Errorf("value ticks over 11-35: %s", got)
	}
}
