//go:build !amd64

package shm

import "sync/atomic"

// CanStream reports whether CopyStream uses non-temporal stores: not here.
func CanStream() bool { return false }

// IntelCPU reports whether this is an Intel x86 processor: not here.
func IntelCPU() bool { return false }

// CopyStream copies src into dst as copy does; see the amd64 version.
func CopyStream(dst, src []byte) int { return copy(dst, src) }

// Prefetch is a hint to fetch the cache line holding *p ahead of a read;
// see the amd64 version. Here it does nothing.
func Prefetch(p *byte) {}

// PrefetchWrite is a hint to take the cache line holding *p ahead of a
// store; see the amd64 version. Here it does nothing.
func PrefetchWrite(p *byte) {}

// haveReleaseStore: no cheaper store than the atomic one here.
const haveReleaseStore = false

func storeRelease(w *atomic.Uint64, v uint64) { w.Store(v) }
