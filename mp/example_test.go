package mp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// Rank 0 sends a slice to rank 1; the element type comes from the slice.
// (mptest.Go runs the ranks as goroutines of this process, as mptest.Run
// does in a test; a real program calls mp.Init and is started by courier
// run, mpirun, srun or torchrun.)
func ExampleSend() {
	err := mptest.Go(2, func(comm *mp.Comm) error {
		data := make([]float32, 4)
		switch comm.Rank() {
		case 0:
			copy(data, []float32{1, 2, 3, 4})
			return mp.Send(comm, data, 1, 7)
		case 1:
			st, err := mp.Recv(comm, data, 0, 7)
			fmt.Println(data, "from rank", st.Source, "tag", st.Tag, "count", st.Count)
			return err
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: [1 2 3 4] from rank 0 tag 7 count 4
}

// Two ranks exchange buffers head to head. Posting both operations before
// waiting cannot deadlock, whatever the size.
func ExampleIsend() {
	err := mptest.Go(2, func(comm *mp.Comm) error {
		peer := 1 - comm.Rank()
		out := make([]int64, 1<<20)
		in := make([]int64, 1<<20)
		out[0] = int64(100 + comm.Rank())
		recv := mp.Irecv(comm, in, peer, 0)
		send := mp.Isend(comm, out, peer, 0)
		if err := mp.WaitAll(recv, send); err != nil {
			return err
		}
		if comm.Rank() == 0 {
			fmt.Println("rank 0 got", in[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: rank 0 got 101
}

// A receive into a buffer smaller than the message fails with ErrTruncate,
// and the error says which ranks and what sizes.
func ExampleRecv_truncate() {
	err := mptest.Go(2, func(comm *mp.Comm) error {
		if comm.Rank() == 0 {
			return mp.Send(comm, []int32{1, 2, 3}, 1, 0)
		}
		_, err := mp.Recv(comm, make([]int32, 2), 0, 0)
		fmt.Println(errors.Is(err, mp.ErrTruncate))
		fmt.Println(err)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// true
	// courier: recv (host) on rank 1 with rank 0, tag 0: message truncated: rank 0 sent 3 × int32 (tag 0) into a buffer of 2 on rank 1
}

// A root collects one message from every other rank, in whatever order they
// come, with AnySource; Status says who sent each.
func ExampleWaitAny() {
	err := mptest.Go(4, func(comm *mp.Comm) error {
		if comm.Rank() != 0 {
			return mp.Send(comm, []int{comm.Rank() * 10}, 0, 1)
		}
		bufs := make([][]int, comm.Size()-1)
		reqs := make([]*mp.Request, len(bufs))
		for i := range reqs {
			bufs[i] = make([]int, 1)
			reqs[i] = mp.Irecv(comm, bufs[i], mp.AnySource, 1)
		}
		sum := 0
		for {
			i, _, err := mp.WaitAny(reqs...)
			if i < 0 {
				break
			}
			if err != nil {
				return err
			}
			sum += bufs[i][0]
		}
		fmt.Println("sum", sum)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: sum 60
}

// A receive posted for a message that may never come (here a stop signal)
// is canceled once it is no longer wanted: its Wait reports ErrCanceled,
// and a message sent later goes to the next receive.
func ExampleRequest_Cancel() {
	err := mptest.Go(2, func(comm *mp.Comm) error {
		stop := []byte{0}
		if comm.Rank() == 0 {
			if err := mp.Barrier(comm); err != nil {
				return err
			}
			return mp.Send(comm, []byte{1}, 1, 9)
		}
		q := mp.Irecv(comm, stop, 0, 9)
		// … the work ends without a stop signal …
		if err := q.Cancel(); err != nil {
			return err
		}
		_, err := q.Wait()
		fmt.Println("canceled:", errors.Is(err, mp.ErrCanceled))
		if err := mp.Barrier(comm); err != nil {
			return err
		}
		_, err = mp.Recv(comm, stop, 0, 9)
		fmt.Println("the next receive got", stop[0])
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// canceled: true
	// the next receive got 1
}

// Every rank contributes a vector; Allreduce leaves the element-wise sum
// on every rank. Allgather collects one block from each rank, in rank
// order.
func ExampleAllreduce() {
	err := mptest.Go(4, func(comm *mp.Comm) error {
		r := float64(comm.Rank())
		grad := []float64{r, 10 * r}
		if err := mp.Allreduce(comm, grad, grad, mp.Sum); err != nil { // in place
			return err
		}
		ids := make([]int32, comm.Size())
		if err := mp.Allgather(comm, []int32{int32(100 + comm.Rank())}, ids); err != nil {
			return err
		}
		if comm.Rank() == 0 {
			fmt.Println(grad, ids)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: [6 60] [100 101 102 103]
}

// Each rank contributes a block of its own length (rank k: k+1 elements),
// and every rank gets them all, in rank order.
func ExampleAllgatherv() {
	err := mptest.Go(3, func(comm *mp.Comm) error {
		counts := []int{1, 2, 3}
		mine := make([]int32, counts[comm.Rank()])
		for i := range mine {
			mine[i] = int32(10 * comm.Rank())
		}
		all := make([]int32, 6)
		if err := mp.Allgatherv(comm, mine, all, counts); err != nil {
			return err
		}
		if comm.Rank() == 2 {
			fmt.Println(all)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: [0 10 10 20 20 20]
}

// A Go value, here a struct with a map and a slice, travels without a
// size agreed in advance; the receiver learns the sender and tag from the
// Status, here of a wildcard receive.
func ExampleSendValue() {
	type job struct {
		Name   string
		Params map[string]float64
		Steps  []int
	}
	err := mptest.Go(2, func(comm *mp.Comm) error {
		if comm.Rank() == 1 {
			return mp.SendValue(comm, job{Name: "relax", Params: map[string]float64{"omega": 1.5}, Steps: []int{10, 20}}, 0, 3)
		}
		j, st, err := mp.RecvValue[job](comm, mp.AnySource, mp.AnyTag)
		fmt.Printf("%+v from rank %d, tag %d\n", j, st.Source, st.Tag)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: {Name:relax Params:map[omega:1.5] Steps:[10 20]} from rank 1, tag 3
}

func ExampleIallreduce() {
	err := mptest.Go(4, func(comm *mp.Comm) error {
		grad := []float64{float64(comm.Rank()), 1}
		req, err := mp.Iallreduce(comm, grad, grad, mp.Sum) // in place
		if err != nil {
			return err
		}
		// Compute while the sum goes on; grad is not touched until Wait.
		local := 0
		for i := range 1000 {
			local += i
		}
		if _, err := req.Wait(); err != nil {
			return err
		}
		if comm.Rank() == 0 {
			fmt.Println(grad, local)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: [6 4] 499500
}

// A receive names its source and tag, or takes any (AnySource, AnyTag);
// the Status says which message it got and how many elements it held.
func ExampleRecv() {
	err := mptest.Go(3, func(comm *mp.Comm) error {
		if comm.Rank() != 0 {
			return mp.Send(comm, make([]int16, comm.Rank()), 0, 10+comm.Rank())
		}
		buf := make([]int16, 8) // large enough for either message
		st, err := mp.Recv(comm, buf, 2, mp.AnyTag)
		if err != nil {
			return err
		}
		fmt.Printf("from rank %d: tag %d, %d elements\n", st.Source, st.Tag, st.Count)
		st, err = mp.Recv(comm, buf, mp.AnySource, 11)
		fmt.Printf("from rank %d: tag %d, %d elements\n", st.Source, st.Tag, st.Count)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// from rank 2: tag 12, 2 elements
	// from rank 1: tag 11, 1 elements
}

// A non-blocking receive is posted early and waited for later: the buffer
// is the library's until Wait returns.
func ExampleIrecv() {
	err := mptest.Go(2, func(comm *mp.Comm) error {
		if comm.Rank() == 1 {
			return mp.Send(comm, []float64{2.5}, 0, 0)
		}
		x := make([]float64, 1)
		req := mp.Irecv(comm, x, 1, 0)
		// … work that does not touch x …
		st, err := req.Wait()
		fmt.Println(x[0], "from rank", st.Source)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: 2.5 from rank 1
}

// Probe learns the size of a message before receiving it, so the receive
// buffer can be made to fit.
func ExampleProbe() {
	err := mptest.Go(2, func(comm *mp.Comm) error {
		if comm.Rank() == 1 {
			return mp.Send(comm, []byte("a message of unknown length"), 0, 4)
		}
		st, err := mp.Probe(comm, mp.AnySource, 4)
		if err != nil {
			return err
		}
		buf := make([]byte, st.Count)
		if _, err := mp.Recv(comm, buf, st.Source, st.Tag); err != nil {
			return err
		}
		fmt.Printf("%d bytes from rank %d: %s\n", st.Count, st.Source, buf)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: 27 bytes from rank 1: a message of unknown length
}

// Bcast copies the root's buffer to every rank.
func ExampleBcast() {
	err := mptest.Go(3, func(comm *mp.Comm) error {
		params := make([]float32, 3)
		if comm.Rank() == 0 {
			copy(params, []float32{0.1, 0.2, 0.3})
		}
		if err := mp.Bcast(comm, params, 0); err != nil {
			return err
		}
		if comm.Rank() == 2 {
			fmt.Println("rank 2 has", params)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: rank 2 has [0.1 0.2 0.3]
}

// Gather collects one block per rank on the root, in rank order; the
// other ranks' receive buffers are not used (nil is fine).
func ExampleGather() {
	err := mptest.Go(4, func(comm *mp.Comm) error {
		mine := []int{comm.Rank() * comm.Rank(), -comm.Rank()}
		var all []int
		if comm.Rank() == 0 {
			all = make([]int, 2*comm.Size())
		}
		if err := mp.Gather(comm, mine, all, 0); err != nil {
			return err
		}
		if comm.Rank() == 0 {
			fmt.Println(all)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: [0 0 1 -1 4 -2 9 -3]
}

// Barrier returns on each rank once every rank has called it: here rank 1
// goes on only after rank 0 has finished its part (with its output
// written).
func ExampleBarrier() {
	err := mptest.Go(3, func(comm *mp.Comm) error {
		if comm.Rank() == 0 {
			fmt.Println("rank 0: checkpoint written")
		}
		if err := mp.Barrier(comm); err != nil {
			return err
		}
		if comm.Rank() == 1 {
			fmt.Println("rank 1: past the barrier")
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// rank 0: checkpoint written
	// rank 1: past the barrier
}

// A master collects results with receives from AnySource; worker 2
// fails. The pending receive ends with ErrPeerLost, the error names the
// lost rank, and the master posts the receive again for the worker that
// lives.
func ExampleOpError_LostRank() {
	err := mptest.Go(3, func(comm *mp.Comm) error {
		switch comm.Rank() {
		case 2:
			comm.Abort(errors.New("worker 2 fails"))
			return nil
		case 1:
			if _, err := mp.Recv(comm, []int{0}, 0, 9); err != nil { // the master's go-ahead
				return err
			}
			return mp.Send(comm, []int{42}, 0, 1)
		}
		result := []int{0}
		for {
			st, err := mp.Recv(comm, result, mp.AnySource, 1)
			if oe, ok := errors.AsType[*mp.OpError](err); ok && errors.Is(err, mp.ErrPeerLost) {
				lost, _ := oe.LostRank()
				fmt.Println("lost rank", lost, "- receiving again")
				if err := mp.Send(comm, []int{1}, 1, 9); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			fmt.Println("result", result[0], "from rank", st.Source)
			return nil
		}
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// lost rank 2 - receiving again
	// result 42 from rank 1
}

// Each rank marks its own compute on its timeline, beside the collective
// that follows it, and writes the timeline at Close. A program records
// one by running with COURIER_TRACE=FILE; mp.WithTrace sets the file
// here, as a test does (the ranks are goroutines of this process). The
// spans are read back from rank 0's file: `courier trace` merges the
// ranks' files and draws them, and Perfetto opens them.
func ExampleComm_Trace() {
	dir, err := os.MkdirTemp("", "courier-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	err = mptest.Go(2, func(comm *mp.Comm) error {
		grad := make([]float64, 1024)
		span := comm.Trace("backward") // without a timeline: nothing, allocating nothing
		for i := range grad {
			grad[i] = float64(comm.Rank() + i)
		}
		span.End()
		return mp.Allreduce(comm, grad, grad, mp.Sum)
	}, mptest.WithInitOptions(mp.WithTrace(filepath.Join(dir, "step.json"))))
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "step.rank0.json")) // FILE less .json, then .rank<r>.json
	if err != nil {
		fmt.Println(err)
		return
	}
	var file struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			Args          struct{ Bytes int64 }
		}
	}
	if err := json.Unmarshal(b, &file); err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range file.TraceEvents {
		if e.Ph == "X" { // a span
			fmt.Println(e.Name, e.Cat, e.Args.Bytes)
		}
	}
	// Output:
	// backward user 0
	// Allreduce coll 8192
}
