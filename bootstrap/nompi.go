//go:build !mpi

package bootstrap

import "context"

// This file is the build without -tags mpi: no MPI is linked, and Detect
// and Connect work from the launcher's environment and courier's own
// rendezvous alone. mpi.go is the build with the tag.

// detectMPI lets Detect go on from the environment: there is no MPI.
func detectMPI() (job Job, handled bool, err error) { return Job{}, false, nil }

// connectMPI lets Connect go on with the rendezvous: there is no MPI.
func connectMPI(context.Context, Job) (ex Exchanger, handled bool, err error) {
	return nil, false, nil
}

// Finalize ends this process's use of MPI in a binary built with -tags mpi
// (see the mpi build's documentation). This binary was built without the
// tag, links no MPI, and Finalize does nothing and returns nil.
//
// mp.Comm.Close calls Finalize after closing its backend, so a program
// never needs to call it itself.
func Finalize() error { return nil }
