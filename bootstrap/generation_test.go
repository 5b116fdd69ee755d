package bootstrap

import (
	"context"
	"testing"
	"time"
)

// TestGenerationsDoNotMix: a rank of another Init generation cannot join
// a rendezvous (its key differs), while ranks of one generation meet.
func TestGenerationsDoNotMix(t *testing.T) {
	jobs := newJobs(t, 2, "s3cret")
	for r := range jobs {
		jobs[r].Generation = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var rank0 Exchanger
	go func() {
		var err error
		rank0, err = Connect(ctx, jobs[0])
		done <- err
	}()
	stale := jobs[1]
	stale.Generation = 0
	_, err := Connect(ctx, stale)
	wantErr(t, "rank 1 of generation 0", err, []error{ErrRefused}, "job key mismatch")

	ex, err := Connect(ctx, jobs[1])
	if err != nil {
		t.Fatalf("rank 1 of generation 1: %v", err)
	}
	defer ex.Close()
	if err := <-done; err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	defer rank0.Close()
}

func TestGenerationNames(t *testing.T) {
	j := Job{JobID: "17.0"}
	if key, id := j.generation("k"); key != "k" || id != "17.0" {
		t.Errorf("generation 0: %q, %q; want the job's own", key, id)
	}
	j.Generation = 2
	key, id := j.generation("k")
	if key == "k" || id != "17.0.init2" {
		t.Errorf("generation 2: %q, %q; want another key and job ID 17.0.init2", key, id)
	}
}
