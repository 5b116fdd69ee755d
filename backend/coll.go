package backend

import (
	"errors"
	"fmt"
)

// CollKind names a collective operation.
type CollKind uint8

// The collectives. Buffer shapes, with n a count every rank passes alike
// and N the number of ranks (Coll.Send and Coll.Recv):
//
//	Bcast          Send = Recv, n elements (root's are sent, every other rank's filled)
//	Reduce         Send n; Recv n at the root (ignored elsewhere)
//	Allreduce      Send n; Recv n
//	Allgather      Send n; Recv N·n (rank k's block at k·n)
//	ReduceScatter  Send N·n; Recv n (the reduction of every rank's block k lands at rank k)
//	Alltoall       Send N·n; Recv N·n (block k of Send goes to rank k, block j of Recv comes from rank j)
//	Barrier        no buffers (Send and Recv empty): it completes once every rank has started it
//	Gather         Send n; Recv N·n at the root (rank k's block at k·n; ignored elsewhere)
//	Scatter        Send N·n at the root (block k goes to rank k; ignored elsewhere); Recv n
//	Scan           Send n; Recv n (rank k gets the reduction over ranks 0 … k)
//	Exscan         Send n; Recv n (rank k > 0 gets the reduction over ranks 0 … k−1; rank 0's is left as it is)
//
// In place: Recv may be the same memory as Send (Bcast always is); for
// Allgather and Gather, Send may be this rank's block of Recv, and for
// ReduceScatter and Scatter Recv this rank's block of Send.
//
// Gatherv, Scatterv, Allgatherv and Alltoallv (blocks of a length per
// rank) name package mp's own collectives in its errors and checks; a Coll
// carries no counts, so mp never offers them to a transport.
const (
	Bcast CollKind = iota + 1
	Reduce
	Allreduce
	Allgather
	ReduceScatter
	Alltoall
	Barrier
	Gather
	Scatter
	Scan
	Exscan
	Gatherv
	Scatterv
	Allgatherv
	Alltoallv
)

var collNames = [...]string{Bcast: "bcast", Reduce: "reduce", Allreduce: "allreduce",
	Allgather: "allgather", ReduceScatter: "reducescatter", Alltoall: "alltoall", Barrier: "barrier",
	Gather: "gather", Scatter: "scatter", Scan: "scan", Exscan: "exscan",
	Gatherv: "gatherv", Scatterv: "scatterv", Allgatherv: "allgatherv", Alltoallv: "alltoallv"}

// String is the operation's name in lower case ("allreduce").
func (k CollKind) String() string {
	if int(k) < len(collNames) && collNames[k] != "" {
		return collNames[k]
	}
	return fmt.Sprintf("collective(%d)", uint8(k))
}

// Rooted reports whether the collective has a root (Bcast, Reduce,
// Gather, Scatter, Gatherv, Scatterv).
func (k CollKind) Rooted() bool {
	switch k {
	case Bcast, Reduce, Gather, Scatter, Gatherv, Scatterv:
		return true
	}
	return false
}

// Reduces reports whether the collective combines values with a ReduceOp
// (Reduce, Allreduce, ReduceScatter, Scan, Exscan).
func (k CollKind) Reduces() bool {
	switch k {
	case Reduce, Allreduce, ReduceScatter, Scan, Exscan:
		return true
	}
	return false
}

// ReduceOp is a reduction operator (of Reduce, Allreduce, ReduceScatter,
// Scan and Exscan): it combines the ranks' buffers element by element.
type ReduceOp uint8

// The reduction operators. Sum and Prod apply to every element type (for
// integers they wrap around); Min and Max to every type but the complex
// ones.
const (
	Sum ReduceOp = iota + 1
	Prod
	Min
	Max
)

var opNames = [...]string{Sum: "sum", Prod: "prod", Min: "min", Max: "max"}

// String is the operator's name ("sum").
func (o ReduceOp) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Valid reports whether o is a known operator.
func (o ReduceOp) Valid() bool { return o >= Sum && o <= Max }

// AppliesTo reports whether o is defined on element type t.
func (o ReduceOp) AppliesTo(t DType) bool {
	if !o.Valid() || !t.Valid() {
		return false
	}
	if t == Complex64 || t == Complex128 {
		return o == Sum || o == Prod
	}
	return true
}

// Coll is one collective call, as package mp has validated it: the
// buffers have the shapes of Kind (see CollKind), one element type, and
// lie in this rank's memory; Op applies to the type; Root is a rank.
type Coll struct {
	Kind       CollKind
	Send, Recv Buffer
	Op         ReduceOp // for the reducing kinds
	Root       int      // for Bcast and Reduce
	Caller     uintptr  // program counter of the user's call, 0 if unknown
}

// Collectives is an optional Conn capability: a transport that runs
// collectives itself (NCCL's own, on a communicator of every rank).
//
// Collective starts c and returns its request, which completes when this
// rank's part is done (its Recv holds the result; its Send may be
// reused). Package mp asks for a Barrier this way too, and runs its own
// (over point-to-point messages) on ErrSkip. Every rank calls the same
// collectives in the same order. A transport that cannot run this one (a
// kind it does not know, an element type or operator it lacks, a
// communicator it did not make) returns an error matching ErrSkip, and
// package mp runs it over point-to-point messages instead.
type Collectives interface {
	Collective(c Coll) (Request, error)
}

// CollRunner is an optional capability of a Conn with Collectives: a
// blocking collective run on the caller's goroutine, with no request to
// hand out, lock and release when it ends at once, as a small collective
// through shared memory most often does (its parts are there, or come
// within a few polls).
//
// RunCollective does what Collective and its request's Wait would: it
// returns (nil, nil) once this rank's part is done, (nil, err) when the
// collective failed or the transport leaves it to package mp (err matches
// ErrSkip, and nothing was done), and (r, nil) when it must wait longer:
// r is then the collective's request, pending, which the caller waits for
// (with its timeout, its reports) and releases, as one from Collective.
// Package mp calls it, where the Conn has it, instead of Collective, for
// every collective it runs through the transport, in the collective's
// turn (a non-blocking one on the communicator's worker goroutine).
type CollRunner interface {
	RunCollective(c Coll) (Request, error)
}

// ErrSkip is returned by Collectives.Collective for a collective the
// transport leaves to package mp's point-to-point algorithms, as
// database/sql/driver.ErrSkip asks database/sql for its fallback.
var ErrSkip = errors.New("backend: fall back to point-to-point")
