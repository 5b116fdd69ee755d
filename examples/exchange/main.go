// Command exchange is the head-to-head case of point-to-point messaging:
// every pair of ranks sends to each other at the same time. Written with
// blocking sends on both sides first, a large exchange deadlocks (each side
// waits for the other's receive); with Isend/Irecv posted together and then
// waited on, it cannot.
//
//	go run ./cmd/courier run -np 2 ./examples/exchange
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/courier-mp/courier/mp"
)

func main() {
	n := flag.Int("n", 16<<20, "float32 elements each rank sends to its partner")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "exchange:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	comm, err := mp.Init(context.Background())
	if err != nil {
		return err
	}
	defer comm.Close()
	rank, size := comm.Rank(), comm.Size()
	if size%2 != 0 {
		return fmt.Errorf("exchange pairs ranks: run it on an even number of ranks, not %d", size)
	}
	partner := rank ^ 1
	out := make([]float32, n)
	in := make([]float32, n)
	for i := range out {
		out[i] = float32(rank*n + i%1000)
	}
	start := time.Now()
	// Both ranks post their receive and their send, then wait for both.
	recv := mp.Irecv(comm, in, partner, 0)
	send := mp.Isend(comm, out, partner, 0)
	if err := mp.WaitAll(recv, send); err != nil {
		return err
	}
	elapsed := time.Since(start)
	for i := range in {
		if want := float32(partner*n + i%1000); in[i] != want {
			return fmt.Errorf("element %d from rank %d is %v, want %v", i, partner, in[i], want)
		}
	}
	mib := float64(4*n) / (1 << 20)
	fmt.Printf("rank %d exchanged %.0f MiB with rank %d in %v (%.2f GB/s each way)\n",
		rank, mib, partner, elapsed.Round(time.Microsecond), float64(4*n)/elapsed.Seconds()/1e9)
	return comm.Close()
}
