package campaign

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/courier-mp/courier/internal/conformance/proctest"
)

// Transport is what a trial's ranks use between them.
type Transport struct {
	// Name is the transport each rank must report for every peer: "tcp"
	// or "shm".
	Name string
	// Env selects it.
	Env []string
}

// Transports are the host transports: TCP (the tcp backend) and shared
// memory (the host backend, every rank on this host).
var Transports = []Transport{
	{Name: "tcp", Env: []string{"COURIER_BACKEND=tcp", "COURIER_TRANSPORTS="}},
	{Name: "shm", Env: []string{"COURIER_BACKEND=host", "COURIER_TRANSPORTS=shm"}},
}

// Config describes one trial.
type Config struct {
	// Exe is the program whose copies are the ranks: one that calls
	// RankMain when InRank (a test binary whose TestMain does).
	Exe string
	// Args are its arguments (for a test binary: -test.run=^$).
	Args      []string
	Transport Transport
	Ranks     int
	// Seed chooses the workload, the rank killed and when.
	Seed uint64
	// MaxKill bounds the time from every rank's "ready" to the kill.
	MaxKill time.Duration
	// HangBound is how long after the kill a survivor may take to end
	// before it counts as hung.
	HangBound time.Duration
	// Dir, when set, keeps the ranks' output of a trial that went wrong.
	Dir string
}

// Survivor is what a rank that was not killed did.
type Survivor struct {
	Rank int
	// Ended: it printed its END line; Hung: it did not exit within the
	// bound; Panicked: the Go runtime reported a panic or fatal error.
	Ended, Hung, Panicked bool
	// Early: it ended before the kill (a failure of its own).
	Early bool
	// Wrong: a result it received was wrong.
	Wrong bool
	// PeerLost: its error matched ErrPeerLost; Lost is the rank the error
	// names (-1: none).
	PeerLost bool
	Lost     int
	// ToError is the time from the kill to its error.
	ToError time.Duration
	// Step is the kind of step that failed; Err the error's text.
	Step, Err string
	// Exit is how its process ended.
	Exit string
}

// Result is one trial's outcome.
type Result struct {
	Config
	Victim    int
	KillAfter time.Duration
	Survivors []Survivor
	// Setup is a failure before the kill (a rank that did not start or
	// join the job); the trial then says nothing about failures.
	Setup error
	// Kept is where the output was kept, if it was.
	Kept string
}

// Bad reports whether the trial found a defect: a hang, a panic, a wrong
// result, a survivor that ended early or without its line, or an error
// that is not ErrPeerLost or does not name the killed rank.
func (r *Result) Bad() bool {
	if r.Setup != nil {
		return true
	}
	for _, s := range r.Survivors {
		if s.Hung || s.Panicked || s.Wrong || s.Early || !s.Ended || !s.PeerLost || s.Lost != r.Victim {
			return true
		}
	}
	return false
}

// proc is a started rank.
type proc struct {
	cmd   *exec.Cmd
	out   bytes.Buffer // all of its output
	mu    sync.Mutex
	ready chan string   // its "ready" line
	read  chan struct{} // closed once read has taken all of its output
	done  chan struct{} // closed once it has exited and its output is all in out
	err   error         // Wait's
}

// Trial runs one trial: cfg.Ranks copies of cfg.Exe join a job on
// loopback, run the workload of cfg.Seed, and one of them, chosen by the
// seed, is killed with SIGKILL at a moment the seed chooses.
func Trial(cfg Config) *Result {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6b696c6c))
	res := &Result{Config: cfg, Victim: rng.IntN(cfg.Ranks), KillAfter: time.Duration(rng.Int64N(int64(cfg.MaxKill)))}
	specs, err := proctest.Loopback(cfg.Ranks)
	if err != nil {
		res.Setup = err
		return res
	}
	procs := make([]*proc, len(specs))
	for i, sp := range specs {
		cmd := exec.Command(cfg.Exe, cfg.Args...)
		cmd.Env = append(os.Environ(), sp.Env...)
		cmd.Env = append(cmd.Env, cfg.Transport.Env...)
		// No wait bound: a hang must show as a rank that does not end.
		cmd.Env = append(cmd.Env, RoleEnv+"="+strconv.FormatUint(cfg.Seed, 10), "COURIER_TIMEOUT=", "COURIER_WATCHDOG=off", "COURIER_CHECK=")
		cmd.ExtraFiles = sp.Files
		p := &proc{cmd: cmd, ready: make(chan string, 1), read: make(chan struct{}), done: make(chan struct{})}
		r, w := io.Pipe()
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			res.Setup = fmt.Errorf("starting rank %d: %w", i, err)
			w.Close()
			for _, q := range procs[:i] {
				q.cmd.Process.Kill()
				<-q.done
			}
			return res
		}
		go p.take(r)
		// Wait returns once the pipe has passed the last bytes on, which
		// may still be in the scanner's buffer: done waits for take too,
		// or a last END line could be missed (a survivor "without END").
		go func() { p.err = cmd.Wait(); w.Close(); <-p.read; close(p.done) }()
		procs[i] = p
	}
	for _, sp := range specs {
		for _, f := range sp.Files {
			f.Close()
		}
	}
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			<-p.done
		}
		if res.Bad() && cfg.Dir != "" {
			res.keep(procs)
		}
	}()

	readyBy := time.After(60 * time.Second)
	for i, p := range procs {
		select {
		case line := <-p.ready:
			if want := want(cfg, i); line != want {
				res.Setup = fmt.Errorf("rank %d: %q, want %q", i, line, want)
				return res
			}
		case <-p.done:
			res.Setup = fmt.Errorf("rank %d ended before it was ready (%v): %s", i, p.err, tail(p.text()))
			return res
		case <-readyBy:
			res.Setup = fmt.Errorf("rank %d was not ready after 60 s", i)
			return res
		}
	}
	time.Sleep(res.KillAfter)
	victim := procs[res.Victim]
	killed := time.Now()
	victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.done
	deadline := killed.Add(cfg.HangBound)
	for i, p := range procs {
		if i == res.Victim {
			continue
		}
		s := Survivor{Rank: i, Lost: -1}
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			s.Hung = true
			// Its goroutines' stacks, for the kept output.
			p.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
			}
		}
		s.Exit = exitText(p.err, s.Hung)
		text := p.text()
		s.Panicked = strings.Contains(text, "panic: ") || strings.Contains(text, "fatal error: ")
		s.parseEnd(text, killed)
		res.Survivors = append(res.Survivors, s)
	}
	return res
}

// want is the ready line of rank i of a trial of cfg.
func want(cfg Config, i int) string {
	tr := make([]string, cfg.Ranks)
	for p := range tr {
		tr[p] = cfg.Transport.Name
	}
	tr[i] = "self"
	return "ready " + strings.Join(tr, ",")
}

// take reads the rank's output into out, passing its ready line on,
// and closes read at the end.
func (p *proc) take(r io.Reader) {
	defer close(p.read)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.out.WriteString(line + "\n")
		p.mu.Unlock()
		if first && strings.HasPrefix(line, "ready") {
			p.ready <- line
			first = false
		}
	}
	io.Copy(io.Discard, r)
}

func (p *proc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// parseEnd reads the rank's END line.
func (s *Survivor) parseEnd(text string, killed time.Time) {
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "END ")
		if !ok {
			continue
		}
		s.Ended = true
		rest, s.Err, _ = strings.Cut(rest, " err=")
		for f := range strings.FieldsSeq(rest) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "at":
				ns, _ := strconv.ParseInt(v, 10, 64)
				s.ToError = time.Unix(0, ns).Sub(killed)
				s.Early = s.ToError < 0
			case "step":
				s.Step = v
			case "peerlost":
				s.PeerLost = v == "true"
			case "lost":
				s.Lost, _ = strconv.Atoi(v)
			case "wrong":
				s.Wrong = v == "true"
			}
		}
		return
	}
}

// keep writes the ranks' output of a bad trial to cfg.Dir.
func (r *Result) keep(procs []*proc) {
	dir := filepath.Join(r.Dir, fmt.Sprintf("%s-seed%d", r.Transport.Name, r.Seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	for i, p := range procs {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d.txt", i)), []byte(p.text()), 0o644)
	}
	r.Kept = dir
}

func exitText(err error, hung bool) string {
	switch {
	case hung:
		return "hung"
	case err == nil:
		return "exit 0"
	}
	return err.Error()
}

// tail is the end of a rank's output, for an error.
func tail(s string) string {
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
