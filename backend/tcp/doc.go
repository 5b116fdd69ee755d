// Package tcp is courier's host backend: the TCP link between ranks (one
// connection per pair, its frames specified in PROTOCOL.md beside this
// file) under the matching engine of internal/engine, and the Open that
// connects a job: TCP between hosts and, for the "host" driver, shared
// memory (backend/shm) between the ranks of one host.
//
// It is registered as "tcp" (TCP between every pair) and "host" (shared
// memory where it can, TCP elsewhere; COURIER_TRANSPORTS=tcp forces TCP);
// programs reach it through package mp (COURIER_BACKEND), not directly.
// When every rank of a job is on one host, the host driver's communicator
// also runs small collectives through shared memory (backend.Collectives,
// hostconn.go; backend/shm's Coll). New, which takes ready connections, is
// for tests and for transports layered on other streams.
//
// Files:
//
//	open.go       the drivers ("tcp", "host"), Open, New, the options
//	connect.go    connecting a job: address cards, which transport each pair uses, dialing and accepting
//	accept.go     accepting the higher ranks: strangers dropped, handshakes side by side, bounded
//	handshake.go  the first frames on a connection: who is calling, checked against the job
//	peer.go       one TCP link: its goroutines, sending, the end of the connection
//	read.go       the frame parser that the reader goroutine and waiters share, partial frames kept
//	poll.go       the engine.Poller: a waiting goroutine reads the socket itself
//	fdconn_*.go   a link's socket off the runtime's netpoller, and the one ppoll that finds the links to read (Linux)
//	write.go      the writer jobs (CTS, DATA, BYE) and who runs them
//	sysio_*.go    the non-blocking reads and the byte count behind poll.go, per system
//	usertimeout_*.go  TCP_USER_TIMEOUT: a partition ends the link within a bound (Linux)
//	pacing_*.go   a link within this host taken off a congestion control that paces (BBR) (Linux)
//	hostconn.go   the host driver's communicator: collectives through shared memory
//	wire.go       the frames as bytes (PROTOCOL.md)
package tcp
