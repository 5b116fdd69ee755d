// Command pingpong bounces a message between ranks 0 and 1 and prints the
// one-way latency and the bandwidth for a range of sizes. With -verify it
// checks every byte and prints a digest per size instead of times: the
// same digests whichever backend (COURIER_BACKEND=tcp or nccl) and
// whichever memory (-device: GPU memory from cuda.Alloc) carries them.
//
//	go run ./cmd/courier run -np 2 ./examples/pingpong
//	go run ./cmd/courier run -np 2 ./examples/pingpong -verify -device
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/mp"
)

func main() {
	iters := flag.Int("iters", 1000, "round trips per size (fewer for large sizes)")
	maxSize := flag.Int("max", 4<<20, "largest message in bytes")
	verify := flag.Bool("verify", false, "check message contents and print a digest instead of times")
	device := flag.Bool("device", false, "send GPU memory (cuda.Alloc on the GPU of the local rank) instead of host memory")
	flag.Parse()
	if err := run(*iters, *maxSize, *verify, *device); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

func run(iters, maxSize int, verify, device bool) error {
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
		mem := "host"
		if device {
			mem = "device"
		}
		if !verify {
			fmt.Printf("# %s backend, %d ranks, %s memory\n", comm.Backend(), comm.Size(), mem)
		}
		if verify {
			fmt.Printf("%10s %12s\n", "bytes", "checksum")
		} else {
			fmt.Printf("%10s %14s %12s\n", "bytes", "latency (µs)", "GB/s")
		}
	}
	buf := make([]byte, maxSize)
	var dbuf cuda.Slice[byte]
	if device {
		if dbuf, err = cuda.Alloc[byte](cuda.Device(max(comm.LocalRank(), 0)), int64(maxSize)); err != nil {
			return err
		}
		defer dbuf.Free()
	}
	for size := 1; size <= maxSize; size *= 4 {
		msg := buf[:size]
		m := message{host: msg}
		if device {
			if m.dev, err = dbuf.Sub(0, int64(size)); err != nil {
				return err
			}
		}
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
					if err := m.toDevice(); err != nil {
						return err
					}
				}
				if err := m.send(comm, peer, 1); err != nil {
					return err
				}
				if err := m.recv(comm, peer, 2); err != nil {
					return err
				}
				if verify {
					if err := m.toHost(); err != nil {
						return err
					}
					sum += digest(msg)
				}
			} else {
				if err := m.recv(comm, peer, 1); err != nil {
					return err
				}
				if verify {
					if err := m.toHost(); err != nil {
						return err
					}
					for j := range msg {
						msg[j] ^= 0xff // the pong is the ping, inverted
					}
					if err := m.toDevice(); err != nil {
						return err
					}
				}
				if err := m.send(comm, peer, 2); err != nil {
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

// message is the buffer of one size: host memory, or device memory with a
// host copy for filling and checking.
type message struct {
	host []byte
	dev  cuda.Slice[byte] // zero unless -device
}

func (m message) onDevice() bool { return m.dev.Len() > 0 }

func (m message) send(c *mp.Comm, peer, tag int) error {
	if m.onDevice() {
		return mp.Send(c, m.dev, peer, tag)
	}
	return mp.Send(c, m.host, peer, tag)
}

func (m message) recv(c *mp.Comm, peer, tag int) error {
	var err error
	if m.onDevice() {
		_, err = mp.Recv(c, m.dev, peer, tag)
	} else {
		_, err = mp.Recv(c, m.host, peer, tag)
	}
	return err
}

func (m message) toDevice() error {
	if !m.onDevice() {
		return nil
	}
	return cuda.CopyToDevice(m.dev, m.host)
}

func (m message) toHost() error {
	if !m.onDevice() {
		return nil
	}
	return cuda.CopyToHost(m.host, m.dev)
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
