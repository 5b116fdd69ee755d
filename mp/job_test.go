package mp

import (
	"net"
	"testing"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/bootstrap"
)

// The transports learn the launch through backend.Job: every field they
// read, and rank 0's address from the listener a launcher handed down.
func TestBackendJob(t *testing.T) {
	job := bootstrap.Job{Rank: 2, Size: 4, LocalRank: 1, LocalSize: 2, Launcher: "manual",
		JobID: "j", Key: "k3y", Addr: "10.0.0.1:7000", Vars: []string{"COURIER_RANK=2"}}
	want := backend.Job{Rank: 2, Size: 4, LocalRank: 1, Key: "k3y", Addr: "10.0.0.1:7000"}
	if got := backendJob(job); got != want {
		t.Errorf("backendJob(%+v) = %+v, want %+v", job, got, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	job.Listener = ln
	want.Addr = ln.Addr().String()
	if got := backendJob(job); got != want {
		t.Errorf("with a listener: backendJob = %+v, want %+v (the listener's address)", got, want)
	}
}
