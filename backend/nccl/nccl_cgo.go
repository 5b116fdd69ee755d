//go:build cgo

package nccl

// This file and nccl_nocgo.go are the only place the package's Go code
// touches C; the C they call is beside them: nccl_wrap.c (the loader and
// the wrappers, declared in nccl_wrap.h) and nccl_types.h (NCCL's types,
// shared with the fake GPU of the tests).
//
// libnccl.so.2 is loaded at run time with dlopen, so the package builds,
// links and runs on machines without NCCL (and without nccl.h: the few
// types it needs are in nccl_types.h). cgo is needed, not a pure-Go loader,
// because ncclCommInitRankConfig takes the 128-byte ncclUniqueId by value,
// which pure-Go call trampolines get wrong on amd64.
//
// NCCL's group state and the CUDA current context belong to the calling
// OS thread, and goroutines move between threads. So each wrapper that
// needs a device does everything in one C call: push the device's primary
// context, make the NCCL calls (for a flush: ncclGroupStart, every
// ncclSend/ncclRecv, ncclGroupEnd), pop the context. The Go side never
// depends on, nor changes, thread state, and no goroutine is locked to a
// thread.
//
// This file does not open libcuda.so.1 itself: the cuda package has it
// loaded, and lends the addresses of cuCtxPushCurrent_v2,
// cuCtxPopCurrent_v2 and cuMemcpy (cuda.Symbol) and the device's primary
// context (cuda.Device.PrimaryContext).

/*
#cgo LDFLAGS: -ldl

#include <stdlib.h>

#include "nccl_wrap.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Result codes the wrappers add to NCCL's (nccl_wrap.h).
const (
	resPushFailed = C.COURIER_NCCL_PUSH_FAILED
	resPopFailed  = C.COURIER_NCCL_POP_FAILED
)

// The codes the Go side names (library.go, errors.go and dtype.go) are
// nccl_types.h's: if one differs, this does not compile (a constant index
// out of range).
var _ = [1]struct{}{}[0|
	(ncclSuccess-C.ncclSuccess)|(ncclRemoteError-C.ncclRemoteError)|(ncclInProgress-C.ncclInProgress)|
	(idBytes-C.COURIER_NCCL_UNIQUE_ID_BYTES)|
	(ncclInt8-C.ncclInt8)|(ncclUint8-C.ncclUint8)|(ncclInt32-C.ncclInt32)|(ncclUint32-C.ncclUint32)|
	(ncclInt64-C.ncclInt64)|(ncclUint64-C.ncclUint64)|(ncclFloat16-C.ncclFloat16)|(ncclFloat32-C.ncclFloat32)|
	(ncclFloat64-C.ncclFloat64)|(ncclBfloat16-C.ncclBfloat16)]

// library is a loaded libnccl. Libraries are never unloaded: NCCL keeps
// threads and CUDA state that do not survive dlclose.
type library struct {
	c       *C.courier_nccl_lib
	path    string
	version int
}

// openLibrary dlopens path and looks up every entry point courier uses.
// The error matches backend.ErrNotSupported and carries the loader's
// reason, which names the path.
func openLibrary(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [1024]C.char
	c := C.courier_nccl_open(cpath, &errbuf[0], C.size_t(len(errbuf)))
	if c == nil {
		return nil, fmt.Errorf("nccl: %w: %s", backend.ErrNotSupported, C.GoString(&errbuf[0]))
	}
	l := &library{c: c, path: path}
	var v C.int
	if r := C.courier_nccl_version(c, &v); r != ncclSuccess {
		return nil, fmt.Errorf("nccl: %w: %s: ncclGetVersion: %s", backend.ErrNotSupported, path, l.resultString(int(r)))
	}
	l.version = int(v)
	return l, nil
}

// resultString is NCCL's name for a result code.
func (l *library) resultString(r int) string {
	switch r {
	case resPushFailed:
		return "could not make the device's CUDA context current"
	case resPopFailed:
		return "could not restore the thread's CUDA context"
	}
	if s := C.courier_nccl_error_string(l.c, C.ncclResult_t(r)); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("ncclResult_t(%d)", r)
}

// lastError is NCCL's description of its last error on comm ("" if none).
func (l *library) lastError(comm uintptr) string {
	if s := C.courier_nccl_last_error(l.c, C.uintptr_t(comm)); s != nil {
		return strings.TrimSpace(C.GoString(s))
	}
	return ""
}

// check turns a result code into an error (nil for ncclSuccess), with
// NCCL's last-error text for comm and the CUresult of a failed context
// switch.
func (l *library) check(r int, op string, comm uintptr, cu C.int) error {
	if r == ncclSuccess {
		return nil
	}
	e := &Error{Code: r, Name: resultName(r), Op: op, Msg: l.resultString(r)}
	if r == resPushFailed || r == resPopFailed {
		e.Msg += fmt.Sprintf(" (CUresult %d)", int(cu))
	} else if comm != 0 || r != ncclInProgress {
		e.Detail = l.lastError(comm)
	}
	return e
}

// devHooks is how C reaches a device: its primary context and the driver
// functions that push and pop it and copy memory.
type devHooks struct {
	c C.courier_nccl_dev
}

// newDevHooks asks the cuda package for device d's primary context and
// the driver entry points the wrappers need.
func newDevHooks(d cuda.Device) (*devHooks, error) {
	ctx, err := d.PrimaryContext()
	if err != nil {
		return nil, err
	}
	h := &devHooks{}
	h.c.ctx = C.uintptr_t(ctx)
	for _, s := range []struct {
		name string
		dst  *C.uintptr_t
	}{
		{"cuCtxPushCurrent_v2", &h.c.push},
		{"cuCtxPopCurrent_v2", &h.c.pop},
		{"cuMemcpy", &h.c.memcpy},
		{"cuEventRecord", &h.c.eventRecord},
	} {
		p, err := cuda.Symbol(s.name)
		if err != nil {
			return nil, err
		}
		*s.dst = C.uintptr_t(p)
	}
	// As the cuda package loads it: the _v2 entry point where the driver
	// has one (0 if neither: completion words are then not used).
	for _, name := range []string{"cuStreamWriteValue64_v2", "cuStreamWriteValue64"} {
		if p, err := cuda.Symbol(name); err == nil && p != 0 {
			h.c.writeValue64 = C.uintptr_t(p)
			break
		}
	}
	return h, nil
}

// uniqueID calls ncclGetUniqueId.
func (l *library) uniqueID() ([idBytes]byte, error) {
	var id [idBytes]byte
	r := C.courier_nccl_unique_id(l.c, unsafe.Pointer(&id[0]))
	return id, l.check(int(r), "ncclGetUniqueId", 0, 0)
}

// initComm starts ncclCommInitRankConfig for a non-blocking communicator
// on the device of h. It returns the communicator as soon as NCCL does:
// its initialization then goes on in NCCL's threads until asyncError stops
// saying ncclInProgress.
//
// With blocking set, the communicator is a blocking one, and initComm
// returns only once it is ready (every rank of it has joined).
func (l *library) initComm(h *devHooks, nranks, rank int, id [idBytes]byte, blocking bool) (uintptr, error) {
	var comm C.uintptr_t
	var cu C.int
	b := C.int(0)
	if blocking {
		b = 1
	}
	r := C.courier_nccl_init(l.c, &h.c, &comm, C.int(nranks), unsafe.Pointer(&id[0]), C.int(rank), b, &cu)
	if r == ncclInProgress {
		return uintptr(comm), nil
	}
	return uintptr(comm), l.check(int(r), "ncclCommInitRankConfig", uintptr(comm), cu)
}

// asyncState calls ncclCommGetAsyncError: it returns inProgress while NCCL
// still works on the last call (initialization, a group), and the
// communicator's error, if it has one.
func (l *library) asyncState(comm uintptr) (inProgress bool, err error) {
	o := C.courier_nccl_async_error(l.c, C.uintptr_t(comm))
	if o.r != ncclSuccess {
		return false, l.check(int(o.r), "ncclCommGetAsyncError", comm, 0)
	}
	if o.state == ncclInProgress {
		return true, nil
	}
	return false, l.check(int(o.state), "communicator", comm, 0)
}

// group issues ops as one group (ncclGroupStart, the sends and receives,
// each on its communicator and stream, ncclGroupEnd) in one C call with the
// device's context current. inProgress reports ncclGroupEnd's
// ncclInProgress: the operations reach the streams only once asyncState
// stops saying so. If timed is set, nccl is how long NCCL's calls took
// (the rest of the call is the context's push and pop, and cgo).
func (l *library) group(h *devHooks, ops cOps, timed bool) (inProgress bool, nccl time.Duration, err error) {
	inProgress, nccl, _, err = l.groupThen(h, ops, timed, nil)
	return inProgress, nccl, err
}

// after is what groupThen queues behind a group in the same call.
type after = C.courier_nccl_after

// noAfter is nothing to queue (never written: C only reads it, and a
// package variable does not make each call allocate).
var noAfter after

// afterWrite and afterRecord describe a write of v to the word at addr,
// and a record of event ev, on stream.
func afterWrite(stream, addr uintptr, v uint64) after {
	return after{kind: C.COURIER_AFTER_WRITE, stream: C.uint64_t(stream), target: C.uint64_t(addr), value: C.uint64_t(v)}
}

func afterRecord(stream, ev uintptr) after {
	return after{kind: C.COURIER_AFTER_RECORD, stream: C.uint64_t(stream), target: C.uint64_t(ev)}
}

// groupThen is group that, once the group is on its stream, also queues
// *then behind it (if not nil) in the same C call: done reports that it
// was queued (an error in queueing it is err).
func (l *library) groupThen(h *devHooks, ops cOps, timed bool, then *after) (inProgress bool, nccl time.Duration, done bool, err error) {
	if len(ops) == 0 {
		return false, 0, false, nil
	}
	t := C.int(0)
	if timed {
		t = 1
	}
	if then == nil {
		then = &noAfter
	}
	out := C.courier_nccl_group(l.c, &h.c, &ops[0], C.int(len(ops)), t, then)
	r, failed, cu := out.r, out.failed, C.int(out.cu)
	nccl = time.Duration(out.ns)
	if r == ncclInProgress {
		return true, nccl, false, nil
	}
	if r == ncclSuccess && out.after > 0 {
		what := "cuStreamWriteValue64"
		if then.kind == C.COURIER_AFTER_RECORD {
			what = "cuEventRecord"
		}
		return false, nccl, false, fmt.Errorf("nccl: %s after a group: CUresult %d", what, int(out.after))
	}
	done = r == ncclSuccess && out.after == 0
	op := "ncclGroupEnd"
	comm := uintptr(ops[0].comm)
	if failed >= 0 {
		o := ops[failed]
		comm = uintptr(o.comm)
		switch o.recv {
		case C.COURIER_OP_RECV:
			op = fmt.Sprintf("ncclRecv(%d elements from NCCL rank %d)", uint64(o.count), int(o.peer))
		case C.COURIER_OP_SEND:
			op = fmt.Sprintf("ncclSend(%d elements to NCCL rank %d)", uint64(o.count), int(o.peer))
		default:
			op = fmt.Sprintf("%s(%d elements)", collCallNames[o.recv], uint64(o.count))
		}
	}
	return false, nccl, done, l.check(int(r), op, comm, cu)
}

// abort calls ncclCommAbort: NCCL stops the communicator's work on the
// device and frees it, without waiting for the other ranks (measured:
// about 0.5 s with a receive pending). On a non-blocking communicator NCCL
// may answer ncclInProgress and free it in the background: the handle is
// gone either way.
func (l *library) abort(h *devHooks, comm uintptr) error {
	var cu C.int
	r := C.courier_nccl_abort(l.c, &h.c, C.uintptr_t(comm), &cu)
	if r == ncclInProgress {
		return nil
	}
	return l.check(int(r), "ncclCommAbort", 0, cu)
}

// copyBytes copies n bytes from src to dst, either of which may be device
// or host memory (cuMemcpy with unified addressing), and returns when the
// copy is done.
func (h *devHooks) copyBytes(dst, src unsafe.Pointer, n int64) error {
	if n == 0 {
		return nil
	}
	var cu C.int
	r := C.courier_nccl_memcpy(&h.c, dst, src, C.size_t(n), &cu)
	return copyErr(r, cu, n)
}

// copyFrom is copyBytes from device address src.
func (h *devHooks) copyFrom(dst unsafe.Pointer, src uintptr, n int64) error {
	if n == 0 {
		return nil
	}
	var cu C.int
	r := C.courier_nccl_memcpy_from(&h.c, dst, C.uint64_t(src), C.size_t(n), &cu)
	return copyErr(r, cu, n)
}

// copyErr explains a failed copy.
func copyErr(r, cu C.int, n int64) error {
	switch {
	case r == resPushFailed:
		return fmt.Errorf("nccl: copying %d bytes: could not make the device's CUDA context current (CUresult %d)", n, int(cu))
	case r != 0:
		return fmt.Errorf("nccl: copying %d bytes: cuMemcpy: CUresult %d", n, int(r))
	case cu != 0:
		return fmt.Errorf("nccl: copying %d bytes: could not restore the thread's CUDA context (CUresult %d)", n, int(cu))
	}
	return nil
}

// cOps is a reusable array of C op descriptors for one flush.
type cOps []C.courier_nccl_op

// add appends one send or receive, on communicator comm and stream.
func (o *cOps) add(comm, stream, buf uintptr, count uint64, peer int, typ ncclType, recv bool) {
	var r C.int32_t = C.COURIER_OP_SEND
	if recv {
		r = C.COURIER_OP_RECV
	}
	*o = append(*o, C.courier_nccl_op{
		buf:    C.uint64_t(buf),
		count:  C.uint64_t(count),
		comm:   C.uint64_t(comm),
		stream: C.uint64_t(stream),
		peer:   C.int32_t(peer),
		_type:  C.int32_t(typ),
		recv:   r,
	})
}

// collCallNames names the NCCL call of each collective kind of op.
var collCallNames = map[C.int32_t]string{
	C.COURIER_OP_ALLREDUCE: "ncclAllReduce", C.COURIER_OP_BROADCAST: "ncclBroadcast", C.COURIER_OP_REDUCE: "ncclReduce",
	C.COURIER_OP_ALLGATHER: "ncclAllGather", C.COURIER_OP_REDUCESCATTER: "ncclReduceScatter",
}

// addColl appends a collective (not Alltoall, which is sends and
// receives), on communicator comm and stream: count as the NCCL call
// takes it, root for Bcast and Reduce.
func (o *cOps) addColl(comm, stream uintptr, kind backend.CollKind, send, recv uintptr, count uint64, typ ncclType, op ncclRedOp, root int) {
	var k C.int32_t
	switch kind {
	case backend.Allreduce:
		k = C.COURIER_OP_ALLREDUCE
	case backend.Bcast:
		k = C.COURIER_OP_BROADCAST
	case backend.Reduce:
		k = C.COURIER_OP_REDUCE
	case backend.Allgather:
		k = C.COURIER_OP_ALLGATHER
	case backend.ReduceScatter:
		k = C.COURIER_OP_REDUCESCATTER
	default:
		k = -1 // the C side answers ncclInvalidArgument
	}
	*o = append(*o, C.courier_nccl_op{
		buf:    C.uint64_t(send),
		buf2:   C.uint64_t(recv),
		count:  C.uint64_t(count),
		comm:   C.uint64_t(comm),
		stream: C.uint64_t(stream),
		peer:   C.int32_t(root),
		_type:  C.int32_t(typ),
		recv:   k,
		redop:  C.int32_t(op),
	})
}
