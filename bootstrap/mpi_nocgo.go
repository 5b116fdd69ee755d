//go:build mpi && !cgo

package bootstrap

import "context"

// The build tag mpi links an MPI library through cgo (mpi.go imports "C"),
// so a build with -tags mpi and CGO_ENABLED=0 cannot work. This file makes
// it fail with one compile error that says so, rather than with a list of
// missing functions: build with CGO_ENABLED=1 and Open MPI's development
// files installed (pkg-config ompi), or without -tags mpi.
var _ = the_mpi_build_tag_needs_cgo__build_with_CGO_ENABLED_1_and_Open_MPI_installed_or_without_tags_mpi

// The stand-ins below only keep the deliberate error above the only one.

func detectMPI() (Job, bool, error) { return Job{}, false, nil }

func connectMPI(context.Context, Job) (Exchanger, bool, error) { return nil, false, nil }

// Finalize does not exist in this build, which cannot compile.
func Finalize() error { return nil }
