package mptest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// A test of a 4-rank halo exchange, in a package's _test.go file: each
// rank is the subtest TestHalo/rankI, so a failure names its rank.
func ExampleRun() {
	testHalo := func(t *testing.T) {
		mptest.Run(t, 4, func(t *testing.T, c *mp.Comm) {
			left, right := (c.Rank()+c.Size()-1)%c.Size(), (c.Rank()+1)%c.Size()
			edge := []float64{float64(c.Rank())}
			ghost := make([]float64, 1)
			if _, err := mp.Sendrecv(c, edge, right, 0, ghost, left, 0); err != nil {
				t.Fatal(err) // ends this rank; the others stop waiting for it
			}
			if ghost[0] != float64(left) {
				t.Errorf("ghost cell %v, want %v", ghost[0], left)
			}
		}, mptest.WithTimeout(10*time.Second))
	}
	_ = testHalo // func TestHalo(t *testing.T) { … } in a real test file
}

// Go runs the ranks without a test and returns their errors, each named
// by its rank.
func ExampleGo() {
	err := mptest.Go(3, func(c *mp.Comm) error {
		sum := []int{c.Rank() + 1}
		if err := mp.Allreduce(c, sum, sum, mp.Sum); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println("sum over 3 ranks:", sum[0])
		}
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// sum over 3 ranks: 6
	// error: <nil>
}

// Two ranks that each wait for a message the other never sends are
// stopped at the bound; the error says what each waited for and where it
// was called.
func ExampleWithTimeout() {
	err := mptest.Go(2, func(c *mp.Comm) error {
		_, err := mp.Recv(c, make([]byte, 8), 1-c.Rank(), 99)
		return err
	}, mptest.WithTimeout(200*time.Millisecond))
	fmt.Println(errors.Is(err, mp.ErrTimeout))
	fmt.Println(strings.Contains(err.Error(), "rank 0 waits for:\n\trecv from rank 1, tag 99, 8 × uint8 (called at "))
	// Output:
	// true
	// true
}
