// Command jacobi solves the steady 2-D heat equation on an N×N grid by
// Jacobi iteration: the top edge is held at 1, the other three edges at 0,
// and each sweep replaces every interior point by the mean of its four
// neighbours. The grid is cut into blocks over a px × py grid of ranks
// (the most square factorization of the number of ranks), made with
// Comm.Split into a row and a column communicator per rank; each sweep
// swaps the blocks' edges with the neighbours by Isend/Irecv and WaitAll,
// and every k sweeps an Allreduce adds up the squared change of the sweep
// over the grid; rank 0 prints its square root, the residual.
//
//	go run ./cmd/courier run -np 4 ./examples/jacobi
//	go run ./cmd/courier run -np 6 ./examples/jacobi -n 256 -iters 2000 -every 200
//
// The residuals printed are the same, bit for bit, on any number of ranks,
// on the host and tcp backends (COURIER_BACKEND) and under mpirun (a build
// with -tags mpi): each point's update is the same arithmetic
// whatever block it lies in, and the sum of squares is added up in one
// fixed order, the order of a serial loop over the rows and, within a row,
// over the columns. Each rank carries the running sums of its rows on from
// its left neighbour and passes them to its right neighbour; the last rank
// of a row of ranks holds the whole rows' sums, and the Allreduce, in which
// every row's slot has exactly one rank that is not zero, only gathers
// them (x + 0 is x), so each rank then adds the rows in order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/courier-mp/courier/mp"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jacobi:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	n, iters, every int
	bits            bool
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("jacobi", flag.ContinueOnError)
	fs.IntVar(&c.n, "n", 128, "interior points on each side of the grid")
	fs.IntVar(&c.iters, "iters", 1000, "Jacobi sweeps")
	fs.IntVar(&c.every, "every", 100, "sweeps between residuals (the last sweep has one too)")
	fs.BoolVar(&c.bits, "bits", false, "print each residual's exact value too (hexadecimal float)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.n < 1 || c.iters < 1 || c.every < 1 {
		return c, fmt.Errorf("-n, -iters and -every must be positive, not %d, %d, %d", c.n, c.iters, c.every)
	}
	return c, nil
}

// Tags of the halo messages: the direction the data travels.
const (
	tagUp = iota
	tagDown
	tagLeft
	tagRight
	tagRowSums
)

// block is one rank's part of the grid: rows [row0, row0+h) and columns
// [col0, col0+w) of the interior, with a halo of one point on each side,
// row-major with stride w+2. At an edge of the grid the halo holds the
// fixed boundary values and is never received into.
type block struct {
	h, w, row0, col0 int
	cur, next        []float64
}

func (b *block) at(i, j int) int { return i*(b.w+2) + j }

// span returns the bounds of part k of n points cut into p near-equal
// parts, the first n%p one point longer.
func span(n, p, k int) (lo, hi int) {
	q, r := n/p, n%p
	lo = k*q + min(k, r)
	hi = lo + q
	if k < r {
		hi++
	}
	return lo, hi
}

// grid returns the most square px × py with px ≤ py and px·py = size.
func grid(size int) (px, py int) {
	px = 1
	for d := 1; d*d <= size; d++ {
		if size%d == 0 {
			px = d
		}
	}
	return px, size / px
}

// cart is the Cartesian layout of the ranks: this rank's place (pr, pc) in
// a px × py grid of ranks, its row communicator (the py ranks of its grid
// row, ranked by column) and column communicator (the px ranks of its grid
// column, ranked by row).
type cart struct {
	px, py, pr, pc int
	row, col       *mp.Comm
}

func newCart(comm *mp.Comm) (*cart, error) {
	px, py := grid(comm.Size())
	c := &cart{px: px, py: py, pr: comm.Rank() / py, pc: comm.Rank() % py}
	var err error
	if c.row, err = comm.Split(c.pr, c.pc); err != nil {
		return nil, err
	}
	if c.col, err = comm.Split(c.pc, c.pr); err != nil {
		c.row.Close()
		return nil, err
	}
	return c, nil
}

func (c *cart) Close() error { return errors.Join(c.col.Close(), c.row.Close()) }

func run(args []string, out io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	comm, err := mp.Init(context.Background())
	if err != nil {
		return err
	}
	defer comm.Close()
	ct, err := newCart(comm)
	if err != nil {
		return err
	}
	defer ct.Close()
	if cfg.n < ct.py {
		return fmt.Errorf("a grid of %d points a side cannot be cut into %d×%d blocks", cfg.n, ct.px, ct.py)
	}
	b := newBlock(cfg.n, ct)
	if comm.Rank() == 0 {
		fmt.Fprintf(out, "jacobi: %d×%d grid on %d ranks (%d×%d blocks), %d sweeps, %s backend\n",
			cfg.n, cfg.n, comm.Size(), ct.px, ct.py, cfg.iters, comm.Backend())
	}
	rows := make([]float64, cfg.n) // each grid row's sum of squared change
	for it := 1; it <= cfg.iters; it++ {
		if err := b.exchange(ct); err != nil {
			return fmt.Errorf("sweep %d: %w", it, err)
		}
		b.sweep()
		if it%cfg.every == 0 || it == cfg.iters {
			res, err := b.residual(comm, ct, rows)
			if err != nil {
				return fmt.Errorf("sweep %d: %w", it, err)
			}
			if comm.Rank() == 0 {
				line := fmt.Sprintf("sweep %6d  residual %.6e", it, res)
				if cfg.bits {
					line += "  " + strconv.FormatFloat(res, 'x', -1, 64)
				}
				fmt.Fprintln(out, line)
			}
		}
		b.cur, b.next = b.next, b.cur
	}
	if err := ct.Close(); err != nil {
		return err
	}
	return comm.Close()
}

// newBlock returns this rank's block of an n×n grid, at 0 but for the
// halo along the hot top edge.
func newBlock(n int, ct *cart) *block {
	r0, r1 := span(n, ct.px, ct.pr)
	c0, c1 := span(n, ct.py, ct.pc)
	b := &block{h: r1 - r0, w: c1 - c0, row0: r0, col0: c0}
	b.cur = make([]float64, (b.h+2)*(b.w+2))
	b.next = make([]float64, len(b.cur))
	if ct.pr == 0 {
		for j := 1; j <= b.w; j++ {
			b.cur[b.at(0, j)], b.next[b.at(0, j)] = 1, 1
		}
	}
	return b
}

// exchange fills the halo of cur from the neighbours' edges: rows over the
// column communicator (contiguous, sent and received in place), columns
// over the row communicator (packed into buffers).
func (b *block) exchange(ct *cart) error {
	var reqs []*mp.Request
	var sendL, sendR, recvL, recvR []float64
	if ct.pr > 0 {
		reqs = append(reqs,
			mp.Irecv(ct.col, b.cur[b.at(0, 1):b.at(0, b.w+1)], ct.pr-1, tagDown),
			mp.Isend(ct.col, b.cur[b.at(1, 1):b.at(1, b.w+1)], ct.pr-1, tagUp))
	}
	if ct.pr < ct.px-1 {
		reqs = append(reqs,
			mp.Irecv(ct.col, b.cur[b.at(b.h+1, 1):b.at(b.h+1, b.w+1)], ct.pr+1, tagUp),
			mp.Isend(ct.col, b.cur[b.at(b.h, 1):b.at(b.h, b.w+1)], ct.pr+1, tagDown))
	}
	if ct.pc > 0 {
		sendL, recvL = b.column(1), make([]float64, b.h)
		reqs = append(reqs, mp.Irecv(ct.row, recvL, ct.pc-1, tagRight), mp.Isend(ct.row, sendL, ct.pc-1, tagLeft))
	}
	if ct.pc < ct.py-1 {
		sendR, recvR = b.column(b.w), make([]float64, b.h)
		reqs = append(reqs, mp.Irecv(ct.row, recvR, ct.pc+1, tagLeft), mp.Isend(ct.row, sendR, ct.pc+1, tagRight))
	}
	if err := mp.WaitAll(reqs...); err != nil {
		return err
	}
	for i := range recvL {
		b.cur[b.at(i+1, 0)] = recvL[i]
	}
	for i := range recvR {
		b.cur[b.at(i+1, b.w+1)] = recvR[i]
	}
	return nil
}

// column returns a copy of column j of cur's interior rows.
func (b *block) column(j int) []float64 {
	c := make([]float64, b.h)
	for i := range c {
		c[i] = b.cur[b.at(i+1, j)]
	}
	return c
}

// sweep writes one Jacobi step of cur into next's interior.
func (b *block) sweep() {
	s := b.w + 2
	for i := 1; i <= b.h; i++ {
		for j := 1; j <= b.w; j++ {
			k := i*s + j
			b.next[k] = 0.25 * (b.cur[k-s] + b.cur[k+s] + b.cur[k-1] + b.cur[k+1])
		}
	}
}

// residual returns the square root of the sum, over the whole grid, of
// the squared change from cur to next, added up in the order of a serial
// loop (row by row, each row left to right), whatever the blocks. rows is
// scratch of one slot per grid row.
func (b *block) residual(comm *mp.Comm, ct *cart, rows []float64) (float64, error) {
	acc := make([]float64, b.h)
	if ct.pc > 0 {
		if _, err := mp.Recv(ct.row, acc, ct.pc-1, tagRowSums); err != nil {
			return 0, err
		}
	}
	for i := range acc {
		s := acc[i]
		for j := 1; j <= b.w; j++ {
			d := b.next[b.at(i+1, j)] - b.cur[b.at(i+1, j)]
			s += d * d
		}
		acc[i] = s
	}
	clear(rows)
	if ct.pc < ct.py-1 {
		if err := mp.Send(ct.row, acc, ct.pc+1, tagRowSums); err != nil {
			return 0, err
		}
	} else {
		copy(rows[b.row0:], acc)
	}
	// Each slot has one rank's whole-row sum and zeros from the others, so
	// the Sum is exact in any order of combining.
	if err := mp.Allreduce(comm, rows, rows, mp.Sum); err != nil {
		return 0, err
	}
	var total float64
	for _, r := range rows {
		total += r
	}
	return math.Sqrt(total), nil
}
