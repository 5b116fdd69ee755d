// Package engine is courier's point-to-point layer for host transports:
// one matching engine that every byte transport below it (a Link per
// peer: TCP between hosts, shared memory within one) feeds, so that a job
// across hosts uses both at once and every semantic is written and tested
// once.
//
// It does what MPI's point-to-point layer does: posted and unexpected
// queues, wildcards, non-overtaking, truncation and the checks of
// COURIER_CHECK=1, probe, an eager protocol for small messages and a
// rendezvous for large ones (the receiver asks for the payload with CTS and
// the sender pushes DATA; or, over a link that can read the sender's
// memory, the receiver pulls it and answers CTSDone), failure of every
// operation that depends on a lost peer, and the pending-operation report.
// A link only moves frames and bytes.
//
// Communicators: the engine serves the communicator of every rank (the
// world, id 0) and those derived from it (Split; package mp's Comm.Split
// and Comm.Dup) over the same links. Each has its own queues and ranks;
// every EAGER and RTS frame names its communicator, so messages of one
// never match, block or reorder another's. A derived communicator's Close
// tells its other members with LEAVE, per communicator, and the links go
// on; the world's Close (BYE) and the loss of a peer end them all. Revoke
// (package mp's Comm.Shrink) ends a communicator's operations at every
// member, the world's too, but for the agreement's messages, and leaves
// the links up for it and for the communicator of the survivors.
//
// Progress: a link's own goroutine hands arrivals to the engine, so an
// Isend with no waiter still completes; and a goroutine waiting in Wait
// polls the transports that can be polled (Poller) itself for a while
// before it parks, so a reply is taken without waking a thread.
//
// Files:
//
//	engine.go     the Engine, New, Attach, Close and Abort; the world's Conn methods
//	comm.go       communicators: Comm, Split, the rank tables, early arrivals, LEAVE, naming a lost peer
//	revoke.go     revoking a communicator for Shrink: Revoke, LEAVE's revoke flag, Lost
//	link.go       the contract with the transports: Link, Job, Puller, Poller
//	wire.go       the frames: kinds, flags, Header, DecodeHeader, the header's check word (Seal, Verify)
//	isend.go      sending: eager, RTS, self-sends, the DATA of a rendezvous
//	irecv.go      posting a receive
//	cancel.go     canceling a receive that has not matched
//	match.go      the queues, matching, the verdict, accepting a rendezvous
//	arrive.go     a peer's frames arriving: Peer.Arrive, Broken
//	progress.go   the waiting goroutine's polling
//	failure.go    ending what depends on a lost peer, or on everything
//	pending.go    the pending-operation report
//	probe.go      Iprobe
//	request.go    requests and their pool; envelopes; unexpected messages
//	completion.go a request's completion: Test, Wait, Done
//	stage.go      device buffers staged through host memory
//	bufpool.go    size-classed buffers for unexpected eager payloads
package engine
