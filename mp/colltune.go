package mp

// Where the collectives over point-to-point messages change algorithm:
// every threshold in one table, chosen by measurement (courier bench -coll
// over the tcp backend, 2, 4 and 8 ranks; the figures, the commands and
// how to measure again are in docs/benchmarks.md, "Collectives over
// point-to-point messages: the algorithm by size and rank count").
//
// Each row is a rank count and a size: for communicators of at most ranks
// ranks (the first row that fits), a collective of fewer than bytes bytes
// takes the latency-optimal algorithm, and one of bytes or more the
// bandwidth-optimal one. The sizes are those courier bench names:
// Allreduce's buffer, Allgather's receive buffer, ReduceScatter's send
// buffer.
var (
	// allreduceSmall: recursive doubling below, ring (reduce-scatter +
	// allgather) from there.
	allreduceSmall = []switchPoint{{2, 64 << 10}, {4, 64 << 10}, {anyRanks, 64 << 10}}
	// allgatherSmall: recursive doubling (a power of two of ranks) or
	// Bruck's algorithm (any other count) below, ring from there.
	allgatherSmall = []switchPoint{{2, 64 << 10}, {4, 64 << 10}, {anyRanks, 64 << 10}}
	// reduceScatterSmall: recursive doubling of the whole buffer, each
	// rank keeping its block, below; ring from there.
	reduceScatterSmall = []switchPoint{{2, 64 << 10}, {4, 64 << 10}, {anyRanks, 64 << 10}}
)

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
