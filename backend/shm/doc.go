// Package shm is courier's shared-memory transport for the ranks of one
// host: a Link of internal/engine per pair of local ranks, over rings in
// memory both processes map.
//
// Each rank owns an inbox, an anonymous memory file (memfd) holding its
// doorbell and one single-producer single-consumer ring per other rank of
// the host (and, when every rank of the job is on this host, the rank's
// collective area); it passes the inbox to those ranks over the
// authenticated unix socket they met on, so no other job or user can
// attach and nothing is ever named in /dev/shm. A message up to the eager
// limit (16 KiB between ranks that can read each other's memory, 64 KiB
// otherwise) is copied into the receiver's ring and out of it; a larger one is
// announced, and then (Options.Copy, COURIER_SHM_COPY) either moves
// through the ring in 64 KiB chunks, the sender writing the next while
// the receiver copies the last out, or the receiver copies it straight out
// of the sender's memory (process_vm_readv: one copy; a collective's
// message, by default, where the kernel allows it). A user's message over
// 128 KiB copied that way is copied by both ranks at once: the sender,
// asked by the receiver, writes chunks into the receiver's buffer
// (process_vm_writev) from one end while the receiver reads from the
// other, the chunks claimed in shared memory (split.go). By default the
// receiver of a user's message starts with the single copy from 128 KiB
// to 8 MiB and with the pipeline elsewhere, measures the two ways as
// messages move, each message from its RTS (stamped by the sender) to its
// end, and takes the clearly faster on its link, per class of sizes
// (choose.go). A waiting goroutine polls the rings
// itself, and the progress goroutine then looks only on a 1 ms timer (or
// at once when the waiter parks); when no one waits, it sleeps on the
// doorbell (a futex) and senders wake it. The unix socket stays open: its
// end is how a rank learns that a peer's process is gone. The memory
// stays mapped until this rank closes, after its peers have gone too.
//
// Coll runs small collectives (Allreduce, Reduce, Bcast, Allgather,
// Barrier) of a job whose ranks are all on this host through the
// collective areas, without messages: each rank writes its part into its
// slot and the others read it straight out of shared memory; a slot's
// head line carries the call's number, its descriptor and a small part
// itself, so a reader of a small collective waits on one line per rank.
//
// Files:
//
//	join.go     setting up: inboxes, passing them, the single-copy probe
//	hub.go      the Hub: polling, the waiters' spin accounting, the progress goroutine
//	link.go     one pair: sending, the outbox, draining the ring, pulling, the end
//	choose.go   pulling or pipelining a user's large message: the rates measured
//	split.go    a pull copied by both ranks: asking the sender, its chunks, the wait
//	record.go   a frame as a ring record
//	coll.go     the collectives through shared memory: Coll, its areas, its request
//	collstep.go one collective's protocol: fill the slot, publish, read, combine
//	collwait.go waiting for the other ranks: spin, sleep on the bell, loss, timeout
//	colltune.go which collectives, up to what size (the measured thresholds)
package shm
