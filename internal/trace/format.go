package trace

// FormatName is what Meta.Format says in every file courier writes, and
// Version the version of the format that this package writes and reads.
const (
	FormatName = "courier-trace"
	Version    = 1
)

// The categories ("cat") of courier's spans.
const (
	CatP2P  = "p2p"  // a point-to-point call: Send, Recv, Isend, Irecv, Sendrecv, the OnStream forms, SendValue, RecvValue
	CatColl = "coll" // a collective, blocking, non-blocking or stream-ordered, and Split and Dup
	CatUser = "user" // a span of the program's own (Comm.Trace, Comm.TraceOnStream)
)

// HostTrack names the track of what a rank's CPU calls did; the tracks of
// CUDA streams are "stream 1", "stream 2", … in the order the rank first
// used them.
const HostTrack = "host"

// File is one trace: a rank's (as package mp writes it) or several
// ranks' on one clock (as Merge makes it). It marshals to the JSON object
// form of the Chrome trace-event format.
type File struct {
	// TraceEvents are the events: "M" events that name the processes and
	// threads, and "X" events, the spans.
	TraceEvents []Event `json:"traceEvents"`
	// DisplayTimeUnit is how viewers show times ("ns").
	DisplayTimeUnit string `json:"displayTimeUnit,omitempty"`
	// OtherData is courier's metadata; viewers show it as the trace's
	// metadata.
	OtherData *Meta `json:"otherData"`
}

// Meta is what a file says about itself beside its events.
type Meta struct {
	// Format is FormatName; Version the format's version.
	Format  string `json:"format"`
	Version int    `json:"version"`
	// OriginUnixNano is the wall-clock instant (nanoseconds since the
	// Unix epoch) that ts 0 stands for: the rank's Init in a rank's file,
	// the earliest Init of the ranks in a merged one.
	OriginUnixNano int64 `json:"origin_unix_ns"`
	// Clock says how the times of the ranks were put on one clock.
	Clock string `json:"clock"`
	// Ranks describes each rank whose events the file holds.
	Ranks []RankInfo `json:"ranks"`
}

// RankInfo is what one rank recorded.
type RankInfo struct {
	// Rank is the rank in the world (the events' pid), Size the world's
	// size.
	Rank int `json:"rank"`
	Size int `json:"size"`
	// Host is the host's name, PID the rank's process id there.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Backend is the backend the world ran on.
	Backend string `json:"backend"`
	// InitUnixNano is the wall-clock instant of the rank's Init, when its
	// recording began (its own ts 0).
	InitUnixNano int64 `json:"init_unix_ns"`
	// Spans is how many spans the file holds for the rank; Dropped how
	// many it recorded but dropped, the oldest first, to stay within
	// Capacity spans.
	Spans    int    `json:"spans"`
	Dropped  uint64 `json:"dropped"`
	Capacity int    `json:"capacity"`
}

// Event is one trace event.
type Event struct {
	// Name is the span's name (the call: "Send", "Allreduce", or a name
	// the program chose) or the metadata's ("process_name", …).
	Name string `json:"name"`
	// Cat is the span's category: CatP2P, CatColl or CatUser.
	Cat string `json:"cat,omitempty"`
	// Ph is the phase: "X" for a span, "M" for metadata.
	Ph string `json:"ph"`
	// Ts is when the span began, in microseconds after the file's
	// origin; Dur how long it lasted (spans only).
	Ts  float64  `json:"ts"`
	Dur *float64 `json:"dur,omitempty"`
	// Pid is the rank, Tid the thread: a lane of one of its tracks.
	Pid int `json:"pid"`
	Tid int `json:"tid"`
	// Args are the span's details, or the metadata's value.
	Args *Args `json:"args,omitempty"`
}

// Args are the details of an event. A span of an operation begins when
// the program called it (posted it) and ends when courier saw it
// complete: for Isend and Irecv, when a Wait or Test reported it; for a
// non-blocking collective, when it finished running.
type Args struct {
	// Name and SortIndex are the values of metadata events.
	Name      string `json:"name,omitempty"`
	SortIndex *int   `json:"sort_index,omitempty"`

	// Track and Lane are the span's track ("host", "stream 1") and its
	// lane there (0 for the first).
	Track string `json:"track,omitempty"`
	Lane  int    `json:"lane,omitempty"`
	// Comm names the communicator, when it is not the world ("split 1
	// of world"); Peer, Source and Root are ranks in it.
	Comm string `json:"comm,omitempty"`

	// A point-to-point operation's peer (a receive's: the rank that sent
	// the message, once known), tag and bytes (a receive's: the bytes
	// received, once known; the buffer's before); AnySource and AnyTag
	// say the receive was posted with a wildcard. Sendrecv's receive half
	// is Source, RecvTag and RecvBytes.
	Peer      *int   `json:"peer,omitempty"`
	Tag       *int   `json:"tag,omitempty"`
	Bytes     *int64 `json:"bytes,omitempty"`
	AnySource bool   `json:"any_source,omitempty"`
	AnyTag    bool   `json:"any_tag,omitempty"`
	Source    *int   `json:"source,omitempty"`
	RecvTag   *int   `json:"recv_tag,omitempty"`
	RecvBytes *int64 `json:"recv_bytes,omitempty"`
	// A collective's root, for the rooted ones; its bytes are Bytes (the
	// send buffer's) and RecvBytes (the receive buffer's).
	Root *int `json:"root,omitempty"`

	// Caller is where the program made the call (file:line), Func the
	// function it was made in.
	Caller string `json:"caller,omitempty"`
	Func   string `json:"func,omitempty"`

	// StartedUs is when the operation began to run, where that differs
	// from its call: a collective's turn, after the collectives started
	// before it.
	StartedUs *float64 `json:"started_us,omitempty"`
	// Clock is "gpu" for a span whose ts and dur are GPU times (CUDA
	// events on its stream); PostedUs and CompletedUs are then its CPU
	// times: the call, and when courier saw it complete.
	Clock       string   `json:"clock,omitempty"`
	PostedUs    *float64 `json:"posted_us,omitempty"`
	CompletedUs *float64 `json:"completed_us,omitempty"`
	// Stream is the CUDA stream's handle, for a span of a stream's track.
	Stream string `json:"stream,omitempty"`

	// Pending says the operation had not completed when the file was
	// written (its span ends then); Error is its error, when it failed.
	Pending bool   `json:"pending,omitempty"`
	Error   string `json:"error,omitempty"`
}
