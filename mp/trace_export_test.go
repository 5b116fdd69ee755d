package mp

// TraceFile is traceFile, for the external tests of the naming rule.
var TraceFile = traceFile

// SetTraceCapacity makes the recorders opened from now on keep n spans,
// and returns what puts the default back.
func SetTraceCapacity(n int) (restore func()) {
	old := traceCapacity
	traceCapacity = n
	return func() { traceCapacity = old }
}
