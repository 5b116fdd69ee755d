// Command ring passes a token around all ranks: rank 0 starts it, each rank
// adds its rank and passes it on, and rank 0 checks the sum when it comes
// back. Run it with the local launcher:
//
//	go run ./cmd/courier run -np 4 ./examples/ring
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/courier-mp/courier/mp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ring:", err)
		os.Exit(1)
	}
}

func run() error {
	comm, err := mp.Init(context.Background())
	if err != nil {
		return err
	}
	defer comm.Close()
	rank, size := comm.Rank(), comm.Size()
	next, prev := (rank+1)%size, (rank+size-1)%size
	const laps = 3
	token := make([]int64, 1)
	for lap := 0; lap < laps; lap++ {
		if rank == 0 {
			token[0] = 0
			if err := mp.Send(comm, token, next, lap); err != nil {
				return err
			}
			st, err := mp.Recv(comm, token, prev, lap)
			if err != nil {
				return err
			}
			want := int64(size * (size - 1) / 2)
			if token[0] != want {
				return fmt.Errorf("lap %d: token came back as %d, want %d", lap, token[0], want)
			}
			fmt.Printf("lap %d: token went round %d ranks and came back from rank %d with %d\n", lap, size, st.Source, token[0])
			continue
		}
		if _, err := mp.Recv(comm, token, prev, lap); err != nil {
			return err
		}
		token[0] += int64(rank)
		if err := mp.Send(comm, token, next, lap); err != nil {
			return err
		}
	}
	fmt.Printf("rank %d of %d done (%s backend)\n", rank, size, comm.Backend())
	return comm.Close()
}
