// Command pingpong bounces a message between ranks 0 and 1 and prints the
// one-way latency and the bandwidth for a range of sizes. With -verify it
// checks every byte and prints a digest per size instead of times: the
// same digests whichever backend (COURIER_BACKEND=tcp or nccl) and
// whichever memory (-device: GPU memory from cuda.Alloc) carries them, and
// whether the messages are ordered on a CUDA stream (-device -stream:
// mp.IsendOnStream, mp.IrecvOnStream) or waited for by the CPU.
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
	device := flag.Bool("device", false, "send GPU memory (cuda.Alloc on the rank's GPU, comm.Device) instead of host memory")
	stream := flag.Bool("stream", false, "with -device: order every copy and message on a CUDA stream (IsendOnStream, IrecvOnStream), the CPU waiting only to read the data")
	flag.Parse()
	if err := run(*iters, *maxSize, *verify, *device, *stream); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

func run(iters, maxSize int, verify, device, stream bool) error {
	if stream && !device {
		return fmt.Errorf("-stream needs -device")
	}
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
	var s *cuda.Stream
	if device {
		dev, err := comm.Device()
		if err != nil {
			return err
		}
		if dbuf, err = cuda.Alloc[byte](dev, int64(maxSize)); err != nil {
			return err
		}
		defer dbuf.Free()
		if stream {
			if s, err = cuda.NewStream(dev); err != nil {
				return err
			}
			defer s.Destroy()
		}
	}
	for size := 1; size <= maxSize; size *= 4 {
		msg := buf[:size]
		m := &message{host: msg, stream: s}
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
			if err := m.finish(); err != nil {
				return err
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
// host copy for filling and checking; with a stream, the copies and
// messages are queued on it, and pending holds the requests to collect.
type message struct {
	host    []byte
	dev     cuda.Slice[byte] // zero unless -device
	stream  *cuda.Stream     // nil unless -stream
	pending []*mp.Request
}

func (m *message) onDevice() bool { return m.dev.Len() > 0 }

func (m *message) send(c *mp.Comm, peer, tag int) error {
	switch {
	case m.stream != nil:
		m.pending = append(m.pending, mp.IsendOnStream(c, m.dev, peer, tag, m.stream))
		return nil
	case m.onDevice():
		return mp.Send(c, m.dev, peer, tag)
	}
	return mp.Send(c, m.host, peer, tag)
}

func (m *message) recv(c *mp.Comm, peer, tag int) error {
	var err error
	switch {
	case m.stream != nil:
		m.pending = append(m.pending, mp.IrecvOnStream(c, m.dev, peer, tag, m.stream))
	case m.onDevice():
		_, err = mp.Recv(c, m.dev, peer, tag)
	default:
		_, err = mp.Recv(c, m.host, peer, tag)
	}
	return err
}

// toDevice copies the host copy to the device (queued on the stream, if
// any).
func (m *message) toDevice() error {
	switch {
	case m.stream != nil:
		return cuda.CopyToDeviceAsync(m.dev, m.host, m.stream)
	case m.onDevice():
		return cuda.CopyToDevice(m.dev, m.host)
	}
	return nil
}

// toHost copies the device buffer to the host copy and returns when it is
// there (on the stream: after whatever is queued on it before).
func (m *message) toHost() error {
	switch {
	case m.stream != nil:
		if err := cuda.CopyToHostAsync(m.host, m.dev, m.stream); err != nil {
			return err
		}
		return m.stream.Synchronize()
	case m.onDevice():
		return cuda.CopyToHost(m.host, m.dev)
	}
	return nil
}

// finish collects the stream-ordered requests of a round trip.
func (m *message) finish() error {
	if m.stream == nil {
		return nil
	}
	if err := m.stream.Synchronize(); err != nil {
		return err
	}
	err := mp.WaitAll(m.pending...)
	m.pending = m.pending[:0]
	return err
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
