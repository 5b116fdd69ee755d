// Package trace is the file format of courier's timelines: the Chrome
// trace-event JSON that Perfetto and chrome://tracing open, with
// courier's own metadata beside the events. Package mp writes one file
// per rank (COURIER_TRACE); courier trace reads them, merges them onto
// one clock and draws them. It imports nothing of courier.
//
// A file is a JSON object: "traceEvents", the events; "displayTimeUnit";
// and "otherData", which holds a Meta: the format's version, the
// wall-clock instant that ts 0 stands for, and what each rank recorded
// (host, process, how many events it kept and dropped). Every rank is a
// process ("pid" = its rank in the world); each of its tracks (what its
// CPU calls did, "host", and each CUDA stream it ordered work on,
// "stream 1", …) is a thread ("tid"). The JSON format requires the
// spans of one thread to nest, which non-blocking operations in flight
// together do not, so a track whose spans overlap without nesting is laid
// out in lanes, one thread each ("host", "host +1", …); every span
// carries its track and lane in its args.
//
// Files:
//
//	format.go  the types: File, Meta, RankInfo, Event, Args
//	build.go   a rank's spans laid out in lanes and threads (Build)
//	lanes.go   the lane of each span of a track
//	read.go    reading and checking a file (Read, ReadFile; ErrFormat)
//	merge.go   several files onto one clock (Merge)
package trace
