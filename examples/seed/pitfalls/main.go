// Command pitfalls makes, on purpose, each mistake of the NCCL guide's
// pitfalls (section 4.7) and the beginner's bug of section 4.1, on two
// ranks, and prints what courier does about it: where NCCL hangs or hands
// back garbage, courier either works or returns a named error.
//
//	go run ./cmd/courier run -np 2 ./examples/seed/pitfalls
//	COURIER_BACKEND=tcp go run ./cmd/courier run -np 2 ./examples/seed/pitfalls
//
// The mistakes, in the order it makes them:
//
//  1. a rank sends to itself (NCCL: waits forever);
//  2. two ranks send to each other before either receives: small
//     messages (which courier sends eagerly), then through Sendrecv, then
//     large ones (which wait for their receive: a real deadlock, which the
//     communicator's timeout turns into an error naming both ranks'
//     operations and the cycle);
//  3. a send of 1000 elements into a receive of 500 (NCCL: no error,
//     garbage), and, with checks (COURIER_CHECK=1), into one of 2000;
//  4. reading a receive's buffer before the request completes, and, with
//     the send-buffer check (COURIER_CHECK=2), writing a send's buffer
//     before its send completes.
//
// Rank 0 prints one line per mistake, "pitfall N: …", with courier's
// answer; the program exits 0 when every answer is the expected one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/courier-mp/courier/mp"
)

func main() {
	timeout := flag.Duration("timeout", 2*time.Second, "the deadlock's communicator's timeout (mp.WithTimeout)")
	flag.Parse()
	if err := run(*timeout); err != nil {
		fmt.Fprintln(os.Stderr, "pitfalls:", err)
		os.Exit(1)
	}
}

// say prints a line on rank 0.
func say(c *mp.Comm, format string, args ...any) {
	if c.Rank() == 0 {
		fmt.Printf(format+"\n", args...)
	}
}

// textSize is the size of the text messages ranks send each other here:
// fixed, since with checks a receive's count must equal the send's.
const textSize = 1024

// sendText sends s to rank to, padded to textSize bytes.
func sendText(c *mp.Comm, s string, to, tag int) error {
	b := make([]byte, textSize)
	copy(b, s)
	return mp.Send(c, b, to, tag)
}

// recvText receives a text sendText sent.
func recvText(c *mp.Comm, from, tag int) (string, error) {
	b := make([]byte, textSize)
	_, err := mp.Recv(c, b, from, tag)
	return strings.TrimRight(string(b), "\x00"), err
}

// firstLine is the first line of an error's text.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func run(timeout time.Duration) error {
	ctx := context.Background()
	c, err := mp.Init(ctx)
	if err != nil {
		return err
	}
	if c.Size() != 2 {
		c.Close()
		return fmt.Errorf("run with 2 ranks (courier run -np 2), not %d", c.Size())
	}
	if err := plain(c); err != nil {
		c.Close()
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}

	c, err = mp.Init(ctx, mp.WithCheck(true), mp.WithSendBufferCheck(true))
	if err != nil {
		return err
	}
	if err := checked(c); err != nil {
		c.Close()
		return err
	}
	rank := c.Rank()
	if err := c.Close(); err != nil {
		return err
	}

	// Rank 0's wait must pass its timeout first, and its report then asks
	// rank 1 for its operations while rank 1 still waits in its send: rank
	// 1's bound is four times as long (a bound is each rank's own), so a
	// loaded machine that runs rank 0 late cannot let rank 1's pass first.
	rankTimeout := timeout
	if rank == 1 {
		rankTimeout = 4 * timeout
	}
	c, err = mp.Init(ctx, mp.WithTimeout(rankTimeout))
	if err != nil {
		return err
	}
	err = deadlock(c)
	c.Close() // aborted by the timeout: its error is the deadlock's
	return err
}

// plain makes the mistakes that need no checks.
func plain(c *mp.Comm) error {
	me, peer := c.Rank(), 1-c.Rank()

	// 1. A send to oneself.
	got := make([]float32, 3)
	if err := mp.Send(c, []float32{1, 2, 3}, me, 1); err != nil {
		return fmt.Errorf("pitfall 1: %w", err)
	}
	if _, err := mp.Recv(c, got, me, 1); err != nil {
		return fmt.Errorf("pitfall 1: %w", err)
	}
	say(c, "pitfall 1: a rank sends to itself: works, received %v (NCCL: waits forever)", got)

	// 2a. Head-to-head sends of small messages: each goes eagerly.
	small := make([]float64, 1024)
	if err := mp.Send(c, small, peer, 2); err != nil {
		return fmt.Errorf("pitfall 2: %w", err)
	}
	if _, err := mp.Recv(c, small, peer, 2); err != nil {
		return fmt.Errorf("pitfall 2: %w", err)
	}
	say(c, "pitfall 2: both ranks send 8 KiB before receiving: works (a small message goes before its receive is posted)")
	// 2b. The exchange written as one call.
	large, in := make([]float64, 1<<20), make([]float64, 1<<20)
	if _, err := mp.Sendrecv(c, large, peer, 3, in, peer, 3); err != nil {
		return fmt.Errorf("pitfall 2: %w", err)
	}
	say(c, "pitfall 2: both ranks exchange 8 MiB with Sendrecv: works")

	// 3a. 1000 elements sent into a receive of 500.
	if me == 0 {
		if err := mp.Send(c, make([]float32, 1000), 1, 4); err != nil {
			return fmt.Errorf("pitfall 3: %w", err)
		}
	} else {
		_, err := mp.Recv(c, make([]float32, 500), 0, 4)
		if !errors.Is(err, mp.ErrTruncate) {
			return fmt.Errorf("pitfall 3: a receive of 500 for a send of 1000 returned %v, want ErrTruncate", err)
		}
		if err := sendText(c, firstLine(err), 0, 5); err != nil {
			return err
		}
	}
	if me == 0 {
		msg, err := recvText(c, 1, 5)
		if err != nil {
			return fmt.Errorf("pitfall 3: %w", err)
		}
		say(c, "pitfall 3: rank 0 sends 1000 × float32, rank 1 receives 500: rank 1 gets ErrTruncate (NCCL: garbage): %s", msg)
	}

	// 4a. Reading a receive's buffer before it completes: Test says
	// whether it has; only then is the buffer the program's.
	buf := make([]int64, 4)
	if me == 1 {
		q := mp.Irecv(c, buf, 0, 6)
		done, _, err := q.Test()
		if err != nil {
			return fmt.Errorf("pitfall 4: %w", err)
		}
		early := fmt.Sprint(buf)
		if err := mp.Send(c, []byte{1}, 0, 7); err != nil { // now rank 0 sends
			return err
		}
		if _, err := q.Wait(); err != nil {
			return fmt.Errorf("pitfall 4: %w", err)
		}
		return sendText(c, fmt.Sprintf("Test said done=%v and the buffer held %s before the message; after Wait it holds %v", done, early, buf), 0, 8)
	}
	if _, err := mp.Recv(c, make([]byte, 1), 1, 7); err != nil {
		return err
	}
	if err := mp.Send(c, []int64{7, 8, 9, 10}, 1, 6); err != nil {
		return err
	}
	msg, err := recvText(c, 1, 8)
	if err != nil {
		return err
	}
	say(c, "pitfall 4: rank 1 reads a receive's buffer before it completes: %s", msg)
	return nil
}

// checked makes the mistakes that the checks catch.
func checked(c *mp.Comm) error {
	me := c.Rank()

	// 3b. 1000 elements into a receive of 2000: fits, but with checks the
	// counts must agree.
	if me == 0 {
		if err := mp.Send(c, make([]float32, 1000), 1, 1); err != nil {
			return fmt.Errorf("pitfall 3: %w", err)
		}
	} else {
		_, err := mp.Recv(c, make([]float32, 2000), 0, 1)
		if !errors.Is(err, mp.ErrMismatch) {
			return fmt.Errorf("pitfall 3: with checks, a receive of 2000 for a send of 1000 returned %v, want ErrMismatch", err)
		}
		if err := sendText(c, firstLine(err), 0, 2); err != nil {
			return err
		}
	}

	// 4b. Writing a send's buffer before the send completes.
	buf := make([]float64, 1<<17) // 1 MiB: the send waits for its receive
	if me == 0 {
		msg, err := recvText(c, 1, 2)
		if err != nil {
			return err
		}
		say(c, "pitfall 3: with COURIER_CHECK=1, rank 1 receives 2000 for a send of 1000: ErrMismatch: %s", msg)
		q := mp.Isend(c, buf, 1, 3)
		buf[1000] = 42 // the mistake: the buffer is the library's until Wait
		if err := mp.Send(c, []byte{1}, 1, 4); err != nil {
			return err
		}
		_, err = q.Wait()
		if !errors.Is(err, mp.ErrModified) {
			return fmt.Errorf("pitfall 4: a send buffer written before completion returned %v, want ErrModified", err)
		}
		say(c, "pitfall 4: with COURIER_CHECK=2, rank 0 writes a send buffer before the send completes: ErrModified: %s", firstLine(err))
		return nil
	}
	if _, err := mp.Recv(c, make([]byte, 1), 0, 4); err != nil {
		return err
	}
	_, err := mp.Recv(c, buf, 0, 3)
	return err
}

// deadlock makes two ranks send large messages to each other before either
// receives: each send waits for a receive that never comes, until the
// communicator's timeout (rank 0's, the shorter: run).
func deadlock(c *mp.Comm) error {
	big := make([]float64, 1<<20)
	err := mp.Send(c, big, 1-c.Rank(), 9)
	if c.Rank() == 1 {
		if !errors.Is(err, mp.ErrPeerLost) && !errors.Is(err, mp.ErrTimeout) {
			return fmt.Errorf("pitfall 2: head-to-head large sends returned %v on rank 1", err)
		}
		return nil
	}
	if !errors.Is(err, mp.ErrTimeout) {
		return fmt.Errorf("pitfall 2: head-to-head large sends returned %v, want ErrTimeout", err)
	}
	// The error lists every rank's operations and the cycle in words;
	// under courier run, the launcher prints them (above) instead.
	cycle := "every rank's operations and the cycle printed by courier run, above"
	for line := range strings.Lines(err.Error()) {
		if strings.Contains(line, "head-to-head") {
			cycle = strings.TrimSpace(line)
		}
	}
	fmt.Printf("pitfall 2: both ranks send 8 MiB before receiving: a deadlock, reported at the timeout: %s; %s\n", firstLine(err), cycle)
	return nil
}
