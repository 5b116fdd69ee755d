package tcp

// The frames on a TCP connection are the engine's (internal/engine,
// wire.go), each a 40-byte header (its last 4 bytes a CRC32-C of the
// others, which the writer seals and the reader verifies) and, for EAGER
// and DATA, its payload: PROTOCOL.md in this folder is the specification.
// read.go parses them; write.go writes them.

// smallWrite is the largest frame copied into one buffer for a single
// write; larger payloads go out with writev, uncopied.
const smallWrite = 4 << 10
