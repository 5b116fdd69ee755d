package mp

// Where the collectives over point-to-point messages change algorithm:
// every threshold in one table, chosen by measurement (courier bench -coll
// over the tcp backend on the 2-core development machine, 2 to 8 ranks;
// the figures, the commands and how to measure again are in
// docs/benchmarks.md, "Collectives over point-to-point messages: the
// algorithm by size and rank count"). A transport with another latency
// (shared memory) or a host with a core per rank moves them: measure
// again there.
//
// Each table has rows of a rank count and a size: for communicators of at
// most ranks ranks (the first row that fits), a collective of fewer than
// bytes bytes takes the table's algorithm. The sizes are those courier
// bench names: Allreduce's buffer, Allgather's receive buffer,
// ReduceScatter's send buffer.
var (
	// allreduceRD: recursive doubling below. Beyond 4 ranks its
	// N·log2 N messages cost more than the trees' extra steps from some
	// KiB on: on 8 ranks over TCP (2026-12-01, 23:40) it took 45.6 µs at
	// 8 B against the trees' 52.8 on 16 cores, 193 against 208 on 2, and
	// at 16 KiB 79 against 90 on 16 cores but 328 against 284 on 2.
	allreduceRD = []switchPoint{{2, 128 << 10}, {4, 32 << 10}, {anyRanks, 4 << 10}}
	// allreduceTree: from allreduceRD's size, a Reduce to rank 0 and a
	// Bcast (binomial trees: twice the steps of recursive doubling, but
	// 2(N−1) messages) below; a ring (reduce-scatter + allgather) from
	// there.
	allreduceTree = []switchPoint{{2, 0}, {4, 512 << 10}, {anyRanks, 2 << 20}}
	// allgatherSmall: recursive doubling (a power of two of ranks) or
	// Bruck's algorithm (any other count) below, ring from there.
	allgatherSmall = []switchPoint{{2, 128 << 10}, {4, 128 << 10}, {anyRanks, 2 << 20}}
	// reduceScatterSmall: recursive doubling of the whole buffer, each
	// rank keeping its block, below; ring from there.
	reduceScatterSmall = []switchPoint{{2, 16 << 10}, {4, 16 << 10}, {anyRanks, 32 << 10}}
	// scanRD: Scan and Exscan by recursive doubling below, along a
	// chain of ranks in pieces of chainPiece bytes from there. On 2
	// cores the chain won at every size on 2 to 8 ranks (its N−1
	// messages against N·log2 N); the row beyond 8 ranks, where N−1
	// hops outgrow ⌈log2 N⌉ steps, is an estimate to measure on a host
	// with a core per rank.
	scanRD = []switchPoint{{8, 0}, {anyRanks, 16 << 10}}
	// bcastBinary: a binary tree below (where the host's ranks leave
	// cores idle: Comm.spare), the binomial tree from there. On 4 ranks
	// or fewer the two have one shape. Back-to-back small Bcasts are
	// bound by the busiest rank's sends, each a system call through the
	// TCP stack, and the binary tree's ranks send twice at most where the
	// binomial root sends ⌈log2 N⌉ times: on 8 ranks of the 16-core host
	// over TCP (docs/benchmarks.md, 2026-12-06, third session) 8 B took
	// 9.85 µs against 13.3 (Open MPI 8.64), 1 KiB 12.6 against 16.8, 16
	// KiB 18.6 against 22.1 and 64 KiB 35.5 against 43.6 (medians of 5
	// rounds); with one P a rank, level. Where ranks outnumber cores the
	// binomial tree kept its lead (8 ranks on 2 cores, 16 KiB: 60-68
	// against 80-125 µs).
	bcastBinary = []switchPoint{{4, 0}, {anyRanks, 64 << 10}}
)

// chainPiece is the size of the pieces a chain (Scan's) passes on.
const chainPiece = 64 << 10

// anyRanks is the rank count of a table's last row.
const anyRanks = 1<<31 - 1

// switchPoint is one row of a table: at most ranks ranks, fewer than bytes
// bytes.
type switchPoint struct {
	ranks int
	bytes int64
}

// small reports whether a collective of n bytes on p ranks takes the
// latency-optimal algorithm of table t.
func small(t []switchPoint, p int, n int64) bool {
	for _, row := range t {
		if p <= row.ranks {
			return n < row.bytes
		}
	}
	return false
}
