package mp_test

import (
	"context"
	"log"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/mp"
)

// A receive into device memory that a CUDA stream waits for on the GPU: the
// copy queued after WaitOn runs once the message is there, and the CPU only
// waits at the end. (Not run here: it needs GPUs and a launcher, e.g.
// mpirun -np 2 with COURIER_BACKEND=nccl.)
func ExampleRequest_WaitOn() {
	comm, err := mp.Init(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	dev, err := comm.Device()
	if err != nil {
		log.Fatal(err)
	}
	const n = 1 << 20
	in, _ := cuda.Alloc[float32](dev, n)
	out, _ := cuda.Alloc[float32](dev, n)
	defer in.Free()
	defer out.Free()
	s, err := cuda.NewStream(dev)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Destroy()

	peer := 1 - comm.Rank()
	if comm.Rank() == 0 {
		if err := mp.Send(comm, in, peer, 0); err != nil {
			log.Fatal(err)
		}
		return
	}
	q := mp.Irecv(comm, in, peer, 0)
	if err := q.WaitOn(s); err != nil { // the stream waits; the CPU does not
		log.Fatal(err)
	}
	cuda.CopyDeviceAsync(out, in, s) // runs after the message has arrived
	if _, err := q.Wait(); err != nil {
		log.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		log.Fatal(err)
	}
}

// A message ordered on a stream, as a kernel would be: the send starts
// after the work queued on s before it, and what is queued after it runs
// once the buffer may be overwritten. (Not run here: it needs GPUs.)
func ExampleIsendOnStream() {
	comm, err := mp.Init(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	dev, _ := comm.Device()
	buf, _ := cuda.Alloc[float64](dev, 4096)
	defer buf.Free()
	s, _ := cuda.NewStream(dev)
	defer s.Destroy()

	cuda.MemsetAsync(buf, 0, s) // produce the data on the stream
	var q *mp.Request
	if comm.Rank() == 0 {
		q = mp.IsendOnStream(comm, buf, 1, 0, s)
	} else {
		q = mp.IrecvOnStream(comm, buf, 0, 0, s)
	}
	// ... queue more work on s: it runs after the transfer ...
	if _, err := q.Wait(); err != nil {
		log.Fatal(err)
	}
}

// A training step ordered on one stream, with no CPU wait between its
// parts: the gradients are produced on s (here a copy stands for the
// backward kernel), summed over the ranks on the GPU after it, and the
// copy queued next (the optimizer's kernel) reads the sum. The CPU queues
// every step without waiting, and waits at the end, for the requests (their
// errors) and the stream. (Not run here: it needs
// GPUs, e.g. mpirun -np 2 with COURIER_BACKEND=nccl; on one rank, or on
// the tcp backend, it runs too, the CPU then waiting for the stream.)
func ExampleIallreduceOnStream() {
	comm, err := mp.Init(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	dev, err := comm.Device()
	if err != nil {
		log.Fatal(err)
	}
	const n = 1 << 20
	local, _ := cuda.Alloc[float32](dev, n) // this rank's gradients, as computed
	grads, _ := cuda.Alloc[float32](dev, n)
	params, _ := cuda.Alloc[float32](dev, n)
	defer local.Free()
	defer grads.Free()
	defer params.Free()
	s, err := cuda.NewStream(dev)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Destroy()

	var reqs []*mp.Request
	for step := 0; step < 3; step++ {
		cuda.CopyDeviceAsync(grads, local, s) // the backward kernel writes grads on s
		req, err := mp.IallreduceOnStream(comm, grads, grads, mp.Sum, s)
		if err != nil {
			log.Fatal(err)
		}
		reqs = append(reqs, req)
		cuda.CopyDeviceAsync(params, grads, s) // the optimizer's kernel: runs after the sum
	}
	if err := mp.WaitAll(reqs...); err != nil {
		log.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		log.Fatal(err)
	}
}

// A kernel timed on the GPU beside the messages on its stream, on the
// rank's timeline: TraceOnStream's span covers the work queued on the
// stream until End, and the stream-ordered send after it is timed the
// same way. (Not run here: it needs GPUs, a launcher, e.g. mpirun -np 2
// with COURIER_BACKEND=nccl, and COURIER_TRACE=FILE.)
func ExampleComm_TraceOnStream() {
	comm, err := mp.Init(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close() // writes the timeline
	dev, err := comm.Device()
	if err != nil {
		log.Fatal(err)
	}
	s, err := cuda.NewStream(dev)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Destroy()
	x, err := cuda.Alloc[float32](dev, 1<<20)
	if err != nil {
		log.Fatal(err)
	}
	defer x.Free()
	span := comm.TraceOnStream("fill", s)
	if err := cuda.MemsetAsync(x, 0, s); err != nil { // a kernel's place
		log.Fatal(err)
	}
	span.End()
	var req *mp.Request
	switch comm.Rank() {
	case 0:
		req = mp.IsendOnStream(comm, x, 1, 0, s) // on s's track after the fill
	case 1:
		req = mp.IrecvOnStream(comm, x, 0, 0, s)
	}
	if err := mp.WaitAll(req); err != nil {
		log.Fatal(err)
	}
}
