package mp

import (
	"fmt"
	"hash/crc32"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// The send-buffer check (COURIER_CHECK=2). A send's buffer belongs to the
// library from Isend until its completion is reported; a program that
// writes into it meanwhile sends undefined bytes (MPI says so; on courier
// an eager message has already gone, a large one goes later, an NCCL one
// whenever the GPU reads it), and no API can forbid it. With the check on,
// Isend takes a CRC32-C of each 4 KiB block of a host buffer, and the
// send's completion takes them again: a block that differs fails the
// request with ErrModified, naming the call and the bytes. Device buffers
// are not checked (the CPU cannot read them without a copy).

// guardBlock is the size of a checksummed block.
const guardBlock = 4096

// castagnoli is CRC32-C's table (hardware-assisted on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// bufGuard is a send buffer's checksums at post.
type bufGuard struct {
	p    unsafe.Pointer
	n    int
	sums []uint32
	pc   uintptr // the Isend's caller
}

// newGuard checksums b for a send posted at pc, or returns nil when b is
// not host memory, or is empty.
func newGuard(b backend.Buffer, pc uintptr) *bufGuard {
	data := b.Bytes()
	if len(data) == 0 {
		return nil
	}
	g := &bufGuard{p: unsafe.Pointer(unsafe.SliceData(data)), n: len(data), pc: pc,
		sums: make([]uint32, 0, (len(data)+guardBlock-1)/guardBlock)}
	for off := 0; off < len(data); off += guardBlock {
		g.sums = append(g.sums, crc32.Checksum(data[off:min(off+guardBlock, len(data))], castagnoli))
	}
	return g
}

// check returns nil when the buffer is as it was at post, else an error
// matching ErrModified that says which bytes changed.
func (g *bufGuard) check() error {
	data := unsafe.Slice((*byte)(g.p), g.n)
	first, last := -1, -1
	for i, want := range g.sums {
		off := i * guardBlock
		if crc32.Checksum(data[off:min(off+guardBlock, g.n)], castagnoli) != want {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil
	}
	return fmt.Errorf("%w: bytes [%d, %d) of the %d-byte send buffer changed between Isend%s and the send's completion: "+
		"a send's buffer belongs to the library until Wait or Test reports it done (the bytes sent are undefined)",
		ErrModified, first*guardBlock, min((last+1)*guardBlock, g.n), g.n, callSite(g.pc))
}
