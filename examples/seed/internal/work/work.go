// Package work is what the seed's overlap and strategy examples compute
// beside their messages, and the sizes they take on the command line: a
// square matrix multiply in float32, on the CPU (goroutines) and on the
// GPU (a kernel written in PTX, loaded with cuda.LoadPTX), over inputs
// whose products are exact, so a result can be checked to the bit
// against a serial loop whatever the order of the sums.
//
// The files: work.go (inputs, the CPU multiply, the check, checksums),
// kernel.go (the PTX kernel and its launch), size.go (message sizes).
package work

import (
	"fmt"
	"hash/crc32"
	"sync"
	"unsafe"
)

// Fill writes into m the values -3 … 3 in a pattern that seed shifts. A
// product of two matrices of such values has integer elements of
// magnitude at most 9n (order n), which float32 holds exactly for n below
// 1.8 million: every order of the sums, with or without fused multiply-add,
// gives the same bits.
func Fill(m []float32, seed int) {
	for i := range m {
		m[i] = float32((i*5+seed*3)%7 - 3)
	}
}

// Multiply sets c to a×b, all three n×n and row-major, on workers
// goroutines (at least one), each taking every workers-th row. It returns
// when c is complete.
func Multiply(c, a, b []float32, n, workers int) error {
	if err := sizes(c, a, b, n); err != nil {
		return err
	}
	workers = max(1, min(workers, n))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				row(c[i*n:(i+1)*n], a[i*n:(i+1)*n], b, n)
			}
		})
	}
	wg.Wait()
	return nil
}

// row sets ci, a row of c, to ai (the same row of a) times b, in the
// order i-k-j, which walks b's rows contiguously.
func row(ci, ai, b []float32, n int) {
	clear(ci)
	for k, aik := range ai {
		bk := b[k*n : (k+1)*n]
		for j := range ci {
			ci[j] += aik * bk[j]
		}
	}
}

// sizes checks that c, a and b hold n×n elements each.
func sizes(c, a, b []float32, n int) error {
	if n < 1 {
		return fmt.Errorf("matrix order %d: must be at least 1", n)
	}
	for _, m := range []struct {
		name string
		len  int
	}{{"c", len(c)}, {"a", len(a)}, {"b", len(b)}} {
		if m.len < n*n {
			return fmt.Errorf("matrix %s holds %d elements, fewer than %d×%d", m.name, m.len, n, n)
		}
	}
	return nil
}

// Check recomputes rows of a×b (n×n, row-major) one at a time, serially,
// spread evenly from the first row to the last, and compares each element
// of c with it exactly (Fill's inputs make the products exact). It
// returns the number of rows it checked, and an error naming the first
// element that differs.
func Check(c, a, b []float32, n, rows int) (int, error) {
	if err := sizes(c, a, b, n); err != nil {
		return 0, err
	}
	rows = max(1, min(rows, n))
	want := make([]float32, n)
	for r := range rows {
		i := 0
		if rows > 1 {
			i = r * (n - 1) / (rows - 1)
		}
		row(want, a[i*n:(i+1)*n], b, n)
		for j, w := range want {
			if got := c[i*n+j]; got != w {
				return r, fmt.Errorf("element (%d, %d) of the %d×%d product is %v, want %v", i, j, n, n, got, w)
			}
		}
	}
	return rows, nil
}

// Checksum is the CRC-32 (IEEE) of the bytes of b.
func Checksum(b []float32) uint32 {
	return crc32.ChecksumIEEE(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b)))
}
