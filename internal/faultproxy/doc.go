// Package faultproxy is a TCP relay for tests that puts faults into the
// byte stream of courier's TCP links (backend/tcp/PROTOCOL.md): it sits
// between a rank that dials and the rank it meant to reach, reads the
// frames in each direction, and can delay them, stall a direction for a
// while, blackhole it (keep reading, forward nothing), cut the connection
// (at a frame, or part way into one), or flip a chosen byte of a chosen
// frame, header or payload.
//
// A test routes a rank's dial through it by giving that rank the proxy's
// address in place of its peer's: in backend/tcp's tests, the all-gather
// hook rewrites the peer's address card. The relay forwards the first
// bytes of each direction (the handshake: Options.Skip) untouched and
// parses frames after them; a fault names the frames it applies to with
// Match.
//
// The proxy runs in the test's process and answers TCP for both ends: the
// ranks' kernels see their bytes acknowledged even when the proxy forwards
// nothing, so a blackhole here is a peer that stopped talking, not a lost
// network (the veth test in backend/tcp is that).
//
// Files:
//
//	proxy.go  the listener, the relayed connections, Close
//	fault.go  the faults and how a direction applies them to its frames
package faultproxy
