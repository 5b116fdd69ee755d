// Package testscope says how much of courier's slowest tests a run of
// go test covers: a short form by default, so that the README's `go test
// ./...` answers within a minute on a two-core machine, and everything
// with COURIER_TEST_FULL=1, which CI sets (docs/testing.md lists what
// each package shortens).
//
// A package whose tests have a short form calls Announce from its
// TestMain, and Full wherever a test chooses between its forms.
package testscope

// The files:
//
//	doc.go       the package doc and this map
//	scope.go     Env, Full and Mode: which form runs
//	announce.go  Announce: one line telling the person at the terminal what the short form leaves out
