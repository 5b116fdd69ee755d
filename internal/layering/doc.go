// Package layering holds no code: its test keeps courier's packages
// layered. It fails when a package imports one it may not (the table of
// allowed edges in layering_test.go, checked with cgo on and off and with
// -tags mpi), and when C appears outside the files that may hold it.
package layering
