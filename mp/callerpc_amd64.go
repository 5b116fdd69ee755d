package mp

// callerPC returns the program counter of the user's call into mp (the
// return address of the exported function that calls it), for the report
// of pending operations. It reads the caller's frame record, which costs
// two loads; runtime.Callers, which it replaces, took about 300 ns per
// message, most of what mp added to a message's time (measured with
// go test -bench SendRecvOverhead ./backend/nccl/). The exported functions
// that call it are never inlined, so the frame is theirs.
func callerPC() uintptr
