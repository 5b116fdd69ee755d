package mp

import (
	"context"
	"testing"
	"time"
)

// TestInitTurns: Inits get their turns in the order they took their
// numbers, one ending lets the next go on, and one that gave up before
// its turn is skipped.
func TestInitTurns(t *testing.T) {
	a, b, c := takeInitTurn(), takeInitTurn(), takeInitTurn()
	if b != a+1 || c != b+1 {
		t.Fatalf("numbers %d, %d, %d: want consecutive", a, b, c)
	}
	ctx := context.Background()
	// Earlier tests of this process may hold numbers below a: wait for them.
	if err := waitInitTurn(ctx, a); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := waitInitTurn(short, c); err == nil {
		t.Fatal("c got its turn before a and b ended")
	}
	endInitTurn(c) // c gives up before its turn
	got := make(chan error, 1)
	go func() { got <- waitInitTurn(ctx, b) }()
	select {
	case err := <-got:
		t.Fatalf("b got its turn while a holds it (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	endInitTurn(a)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	endInitTurn(b)
	d := takeInitTurn()
	if err := waitInitTurn(ctx, d); err != nil { // c was skipped
		t.Fatal(err)
	}
	endInitTurn(d)
}
