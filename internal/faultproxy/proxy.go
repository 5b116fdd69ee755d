package faultproxy

import (
	"errors"
	"net"
	"sync"
)

// Options configures a proxy.
type Options struct {
	// Skip is how many bytes each direction ([Up], [Down]) forwards
	// untouched before its first frame: the handshake's share of that
	// direction (0 when the connections carry frames from their start).
	Skip [2]int64
	// Faults are applied, in their order, to every frame they match.
	// Match functions are called one at a time.
	Faults []Fault
}

// Proxy relays the TCP connections made to its address to its target,
// with faults. Close it when done.
type Proxy struct {
	ln     net.Listener
	target string
	opts   Options

	mu    sync.Mutex
	fired []int
	conns map[*conn]struct{}
	shut  bool
	wg    sync.WaitGroup
}

// conn is one relayed connection: the dialer's side and the target's.
type conn struct {
	a, b  net.Conn
	spent []bool // the faults that have acted on this connection
	once  sync.Once
	done  chan struct{}
}

// close ends both sides, once.
func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		c.a.Close()
		c.b.Close()
	})
}

// Listen starts a proxy on a loopback port that relays every connection
// to target (host:port), applying o's faults.
func Listen(target string, o Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, opts: o, fired: make([]int, len(o.Faults)), conns: map[*conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the address that dials reach the proxy at.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Fired reports how many frames fault k of Options.Faults has acted on,
// over every connection.
func (p *Proxy) Fired(k int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired[k]
}

// Close stops the proxy: it closes the listener and every relayed
// connection, and returns once the relay's goroutines have ended.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.shut = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// serve accepts connections and relays each to the target.
func (p *Proxy) serve() {
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		c := &conn{a: a, b: b, spent: make([]bool, len(p.opts.Faults)), done: make(chan struct{})}
		p.mu.Lock()
		if p.shut {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		var both sync.WaitGroup
		both.Go(func() { p.relay(c, Up, a, b); halfClose(b) })
		both.Go(func() { p.relay(c, Down, b, a); halfClose(a) })
		p.wg.Go(func() {
			both.Wait()
			c.close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		})
	}
}

// halfClose passes the end of one direction on: the writer's side of nc
// is shut, as the sender shut its own.
func halfClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}
