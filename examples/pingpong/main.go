// Command pingpong bounces a message between ranks 0 and 1 and prints the
// one-way latency and the bandwidth for a range of sizes. With -check it
// verifies every byte instead of timing.
//
//	go run ./cmd/courier run -np 2 ./examples/pingpong
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
	iters := flag.Int("iters", 1000, "round trips per size (fewer for large sizes)")
	maxSize := flag.Int("max", 4<<20, "largest message in bytes")
	verify := flag.Bool("verify", false, "check message contents and print a digest instead of times")
	flag.Parse()
	if err := run(*iters, *maxSize, *verify); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

func run(iters, maxSize int, verify bool) error {
	comm, err := mp.Init(context.Background())
	if err != nil {
		return err
	}
	defer comm.Close()
	if comm.Size() < 2 {
		return fmt.Errorf("pingpong needs 2 ranks, has %d", comm.Size())
	}
	rank := comm.Rank()
	if rank > 1 {
		return comm.Close() // only ranks 0 and 1 play
	}
	peer := 1 - rank
	if rank == 0 {
		fmt.Printf("# %s backend, %d ranks\n", comm.Backend(), comm.Size())
		if verify {
			fmt.Printf("%10s %12s\n", "bytes", "checksum")
		} else {
			fmt.Printf("%10s %14s %12s\n", "bytes", "latency (µs)", "GB/s")
		}
	}
	buf := make([]byte, maxSize)
	for size := 1; size <= maxSize; size *= 4 {
		msg := buf[:size]
		n := iters
		if size >= 1<<20 {
			n = max(10, iters/100)
		}
		if verify {
			n = 3
		}
		if err := mp.Barrier(comm); err != nil {
			return err
		}
		start := time.Now()
		var sum uint64
		for i := 0; i < n; i++ {
			if rank == 0 {
				if verify {
					fill(msg, i)
				}
				if err := mp.Send(comm, msg, peer, 1); err != nil {
					return err
				}
				if _, err := mp.Recv(comm, msg, peer, 2); err != nil {
					return err
				}
				if verify {
					sum += digest(msg)
				}
			} else {
				if _, err := mp.Recv(comm, msg, peer, 1); err != nil {
					return err
				}
				if verify {
					for j := range msg {
						msg[j] ^= 0xff // the pong is the ping, inverted
					}
				}
				if err := mp.Send(comm, msg, peer, 2); err != nil {
					return err
				}
			}
		}
		if rank != 0 {
			continue
		}
		if verify {
			fmt.Printf("%10d %12x\n", size, sum)
			continue
		}
		oneWay := time.Since(start) / time.Duration(2*n)
		fmt.Printf("%10d %14.2f %12.3f\n", size, float64(oneWay.Nanoseconds())/1e3, float64(size)/oneWay.Seconds()/1e9)
	}
	return comm.Close()
}

func fill(b []byte, round int) {
	for i := range b {
		b[i] = byte(i*7 + round)
	}
}

func digest(b []byte) uint64 {
	var h uint64 = 14695981039346656037
	for _, x := range b {
		h = (h ^ uint64(x)) * 1099511628211
	}
	return h
}
