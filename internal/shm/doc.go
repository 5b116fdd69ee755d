// Package shm holds the primitives a shared-memory transport between the
// ranks of one host is built from: memory shared by descriptor, rings of
// records in it, a doorbell to sleep on, single-copy transfers between
// processes, and the checks that say whether two processes can use them
// (same host, peer still alive). It is a leaf: it imports the standard
// library and golang.org/x/sys/unix only, and knows nothing of messages,
// matching or ranks.
//
// # Setup, as a transport would do it
//
// Two processes that HostID says share a host connect over a unix socket
// (an abstract one: it is per network namespace, as HostID is). The
// creator makes a Segment, lays out a Ring per direction and a Bell word
// per process in it, passes the segment's descriptor with SendFds and,
// once the peer has mapped it (Map, then CloseFd), drops its own with
// CloseFd: the memory then has no name and no descriptor anywhere, and
// disappears with the last mapping, even after a crash. Each process
// publishes its pid and ProbeAddr; each calls CanReadFrom on the other to
// learn whether ReadFrom and WriteTo (one copy, by the kernel) work
// between them, and WatchPid to notice the peer's death.
//
// # Moving records
//
// A producer Reserves room in its ring, writes the record there, Commits
// it and Rings the consumer's bell (one atomic load unless the consumer
// sleeps). A consumer polls Empty or Next, Consumes each record when it is
// done with it, and, when it has spun long enough, Arms its bell,
// re-checks its rings and Sleeps: Bell documents the protocol and why no
// wake-up is lost. A producer that finds no room says so with WantSpace
// and sleeps on its own bell the same way; the consumer rings it after
// Consume when TakeSpaceWanted says so. Nothing here allocates per record
// or spawns a goroutine.
//
// Memory written by another process is never trusted: a corrupt ring
// index or record header is an error wrapping ErrCorrupt, never a panic
// or an access outside the ring.
//
// # Platforms
//
// Linux only (memfd_create, futex, process_vm_readv, pidfd_open; x86-64
// first, any Linux architecture builds). Elsewhere the package builds and
// every system-facing function returns an error wrapping ErrNotSupported;
// Ring and the Bell's atomics work anywhere, but a Bell cannot sleep.
//
// # Files
//
//	doc.go          this overview
//	errors.go       ErrNotSupported, ErrCorrupt
//	segment.go      Segment (segment_linux.go: Create, Map, CloseFd, Close)
//	fdpass.go       MaxFds (fdpass_linux.go: SendFds, RecvFds over SCM_RIGHTS)
//	ring.go         Ring: the layout, Reserve/ReserveAligned/Commit, Next/Consume, WantSpace
//	copy_amd64.go   CopyStream: a large copy with non-temporal stores (copy_amd64.s; copy_other.go: copy)
//	bell.go         Bell: Arm, Disarm, Sleep, Ring, and the protocol
//	futex_linux.go  the futex system call (FUTEX_WAIT, FUTEX_WAKE, shared)
//	cma.go          ProbeAddr (cma_linux.go: ReadFrom, WriteTo, CanReadFrom)
//	claims.go       Claims: a range of chunks two processes take from either end
//	hostid_linux.go HostID
//	pidwatch.go     PidWatch (pidwatch_linux.go: WatchPid, Exited, Close)
//	*_other.go      the same names off Linux: ErrNotSupported
//
// The tests start the test binary again as a helper process (TestMain,
// roles in main_test.go; the shared layout in pair_test.go) to run rings,
// bells and transfers between two real processes; bench_test.go measures
// them.
package shm
