//go:build !linux

package engine

import "runtime"

// osYield gives the processor to other goroutines; other systems get no
// core-level yield.
func osYield() { runtime.Gosched() }
