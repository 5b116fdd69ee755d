// Command sync is the NCCL guide's first example (section 4.3) written
// with courier: rank 0 sends a buffer of floats to rank 1, which prints
// a checksum of what it got beside the one rank 0 sent, in the forms the
// guide sets side by side. Blocking: mp.Send and mp.Recv return when the
// buffer may be reused (the guide's ncclSend + cudaStreamSynchronize, in
// one call). Non-blocking: mp.Isend and mp.Irecv return at once, and Wait
// is when the buffer is the program's again. Stream-ordered (GPU memory
// only): mp.IsendOnStream and mp.IrecvOnStream queue the message on a
// CUDA stream, after the stream's earlier work and before its later work,
// without a CPU wait; the copy back to the host is queued behind the
// receive on the same stream, and one Synchronize is the only time the
// CPU waits (forget it, and the CPU reads the buffer before the data is
// there: the guide's pitfall).
//
// Run it with:
//
//	go run ./cmd/courier run -np 2 ./examples/seed/sync
//	go run ./cmd/courier run -np 2 ./examples/seed/sync -device
//
// -device sends GPU memory (on a GPU machine; the nccl backend needs a GPU
// per rank, the host and tcp backends stage through the host). Without a
// GPU, -device says so and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"unsafe"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/mp"
)

func main() {
	n := flag.Int("n", 1<<20, "floats to send")
	device := flag.Bool("device", false, "send GPU memory (cuda.Alloc on the rank's GPU), stream-ordered too")
	flag.Parse()
	if err := run(*n, *device); err != nil {
		fmt.Fprintln(os.Stderr, "sync:", err)
		os.Exit(1)
	}
}

// sum is the CRC32 of a float buffer's bytes.
func sum(b []float32) uint32 {
	return crc32.ChecksumIEEE(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b)))
}

// fill writes round's values into b.
func fill(b []float32, round int) {
	for i := range b {
		b[i] = float32(i%1000) + float32(round)*0.5
	}
}

func run(n int, device bool) error {
	c, err := mp.Init(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	if c.Size() != 2 {
		return fmt.Errorf("run with 2 ranks (courier run -np 2), not %d", c.Size())
	}
	me := c.Rank()
	host := make([]float32, n)
	// report sends rank 0's checksum to rank 1, which prints both.
	report := func(form string, round int) error {
		if me == 0 {
			return mp.Send(c, []uint32{sum(host)}, 1, 100+round)
		}
		sent := make([]uint32, 1)
		if _, err := mp.Recv(c, sent, 0, 100+round); err != nil {
			return err
		}
		got := sum(host)
		match := "match"
		if got != sent[0] {
			match = "DIFFER"
		}
		fmt.Printf("%-15s %d floats: rank 0 sent checksum %08x, rank 1 received %08x: %s\n", form, n, sent[0], got, match)
		if got != sent[0] {
			return errors.New("the checksums differ")
		}
		return nil
	}

	// Blocking.
	if me == 0 {
		fill(host, 1)
		err = mp.Send(c, host, 1, 1)
	} else {
		_, err = mp.Recv(c, host, 0, 1)
	}
	if err != nil {
		return err
	}
	if err := report("blocking", 1); err != nil {
		return err
	}

	// Non-blocking: the buffer is the library's until Wait.
	var q *mp.Request
	if me == 0 {
		fill(host, 2)
		q = mp.Isend(c, host, 1, 2)
	} else {
		clear(host)
		q = mp.Irecv(c, host, 0, 2)
	}
	if _, err := q.Wait(); err != nil {
		return err
	}
	if err := report("non-blocking", 2); err != nil {
		return err
	}
	if !device {
		return nil
	}

	dev, err := c.Device()
	if errors.Is(err, mp.ErrNotSupported) {
		if me == 1 {
			fmt.Printf("stream-ordered: skipped, no GPU here (%v)\n", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	buf, err := cuda.Alloc[float32](dev, int64(n))
	if err != nil {
		return err
	}
	defer buf.Free()
	s, err := cuda.NewStream(dev)
	if err != nil {
		return err
	}
	defer s.Destroy()

	// Blocking, from GPU memory: Send returns when the GPU has read it.
	if me == 0 {
		fill(host, 3)
		if err := cuda.CopyToDevice(buf, host); err != nil {
			return err
		}
		err = mp.Send(c, buf, 1, 3)
	} else {
		if _, err = mp.Recv(c, buf, 0, 3); err == nil {
			err = cuda.CopyToHost(host, buf)
		}
	}
	if err != nil {
		return err
	}
	if err := report("blocking (GPU)", 3); err != nil {
		return err
	}

	// Stream-ordered: copy in, send, receive, copy out, all queued on s.
	pinned, err := cuda.HostAlloc[float32](int64(n))
	if err != nil {
		return err
	}
	defer pinned.Free()
	p := pinned.Slice()
	if me == 0 {
		fill(p, 4)
		if err := cuda.CopyToDeviceAsync(buf, p, s); err != nil {
			return err
		}
		q = mp.IsendOnStream(c, buf, 1, 4, s)
	} else {
		clear(p)
		q = mp.IrecvOnStream(c, buf, 0, 4, s)
		if err := cuda.CopyToHostAsync(p, buf, s); err != nil {
			return err
		}
	}
	// The one CPU wait: the stream has done everything queued on it.
	if err := s.Synchronize(); err != nil {
		return err
	}
	if _, err := q.Wait(); err != nil { // its status and errors; the GPU has finished it
		return err
	}
	copy(host, p)
	return report("stream-ordered", 4)
}
