//go:build !linux

package engine

import "runtime"

// osYield gives the processor to other goroutines; other systems get no
// core-level yield.
func osYield() { runtime.Gosched() }

// hostCPUs is unknown here (0): runtime.NumCPU stands for it.
func hostCPUs() int { return 0 }
