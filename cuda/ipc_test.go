package cuda

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// ipcChildPrefix is the value prefix of COURIER_CUDA_TEST_CHILD (the package's
// child-process variable) that makes TestMain run ipcChild instead of the
// tests, with the handle after it: the other process of TestIPC.
const ipcChildPrefix = "ipc:"

// ipcWords is the length of TestIPC's allocation, in uint32.
const ipcWords = 1 << 16

// Memory one process allocates, another maps by its handle: the second
// reads what the first wrote and writes back what the first then reads,
// on the real driver (two processes on one GPU) and on the fake one (a
// memory file the second process maps). The misuses are errors:
// exporting a sub-slice or an opened mapping, opening more than the
// allocation holds, freeing an opened mapping, closing this process's
// own memory, opening a handle in the process that exported it.
func TestIPC(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		s, err := Alloc[uint32](0, ipcWords)
		noErr(t, err)
		defer func() { noErr(t, s.Free()) }()
		want := make([]uint32, ipcWords)
		for i := range want {
			want[i] = uint32(i)*2654435761 + 1
		}
		noErr(t, CopyToDevice(s, want))
		h, err := s.IPCHandle()
		noErr(t, err)

		sub, err := s.Sub(1, 2)
		noErr(t, err)
		_, err = sub.IPCHandle()
		wantIs(t, err, ErrInvalid)
		wantIs(t, s.CloseIPC(), ErrInvalid)
		if o, err := OpenIPC[uint32](0, h, ipcWords); err == nil {
			o.CloseIPC()
			t.Fatal("a handle opened in the process that exported it")
		}

		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+ipcChildPrefix+hex.EncodeToString(h[:]))
		if fakeActive {
			cmd.Env = append(cmd.Env, LibraryEnv+"="+buildFake(t))
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ipc child: ok") {
			t.Fatalf("the other process: %v\n%s", err, out)
		}

		got := make([]uint32, ipcWords)
		noErr(t, CopyToHost(got, s))
		for i := range got {
			if got[i] != ^want[i] {
				t.Fatalf("word %d is %#x after the other process wrote %#x", i, got[i], ^want[i])
			}
		}
	})
}

// ipcChild is TestIPC's other process: it opens the handle in env, checks
// the words, writes their complement and closes the mapping. It returns
// the process's exit code.
func ipcChild(env string) int {
	fail := func(format string, args ...any) int {
		fmt.Printf("ipc child: "+format+"\n", args...)
		return 1
	}
	b, err := hex.DecodeString(env)
	if err != nil || len(b) != len(IPCHandle{}) {
		return fail("bad handle %q", env)
	}
	var h IPCHandle
	copy(h[:], b)
	if _, err := OpenIPC[uint32](0, h, ipcWords+1); err == nil {
		return fail("opened more than the allocation holds")
	}
	s, err := OpenIPC[uint32](0, h, ipcWords)
	if err != nil {
		return fail("OpenIPC: %v", err)
	}
	if _, err := s.IPCHandle(); err == nil {
		return fail("exported memory it had opened")
	}
	if err := s.Free(); err == nil {
		return fail("freed memory it had opened")
	}
	got := make([]uint32, ipcWords)
	if err := CopyToHost(got, s); err != nil {
		return fail("CopyToHost: %v", err)
	}
	for i := range got {
		if want := uint32(i)*2654435761 + 1; got[i] != want {
			return fail("word %d is %#x, want %#x", i, got[i], want)
		}
		got[i] = ^got[i]
	}
	if err := CopyToDevice(s, got); err != nil {
		return fail("CopyToDevice: %v", err)
	}
	if err := s.CloseIPC(); err != nil {
		return fail("CloseIPC: %v", err)
	}
	if err := s.CloseIPC(); err == nil {
		return fail("closed a mapping twice")
	}
	fmt.Println("ipc child: ok (" + strconv.Itoa(ipcWords) + " words)")
	return 0
}

// ExportIPC of memory inside an allocation names the allocation, the
// memory's offset in it and a number that no later allocation gets, even
// at the same address; the handle is the allocation's own. What is not in
// one live allocation of Alloc is refused.
func TestExportIPC(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		s, err := Alloc[uint32](0, 1024)
		noErr(t, err)
		r, err := ExportIPC(0, s.Ptr()+40, 64)
		noErr(t, err)
		if r.Offset != 40 || r.Size != 4096 || r.ID == 0 {
			t.Fatalf("region %+v, want offset 40 of 4096 bytes, a nonzero ID", r)
		}
		h, err := s.IPCHandle()
		noErr(t, err)
		if r.Handle != h {
			t.Fatal("ExportIPC's handle is not the allocation's")
		}
		again, err := ExportIPC(0, s.Ptr(), 4096)
		noErr(t, err)
		if again.ID != r.ID || again.Handle != r.Handle {
			t.Fatalf("the same allocation exported as %+v, then %+v", r, again)
		}
		_, err = ExportIPC(0, s.Ptr()+4000, 200) // passes the end
		wantIs(t, err, ErrInvalid)
		_, err = ExportIPC(0, s.Ptr(), -1)
		wantIs(t, err, ErrInvalid)
		ids := map[uint64]bool{r.ID: true}
		var told []uint64
		stop := WatchFrees(func(id uint64) { told = append(told, id) })
		plain, err := Alloc[byte](0, 64) // never exported: no word of its free
		noErr(t, err)
		noErr(t, plain.Free())
		noErr(t, s.Free())
		stop()
		if len(told) != 1 || told[0] != r.ID {
			t.Fatalf("the watcher was told of %v; want only the exported allocation %d", told, r.ID)
		}
		_, err = ExportIPC(0, s.Ptr(), 4)
		if err == nil {
			t.Fatal("freed memory exported")
		}
		// Later allocations, some likely at the freed address, never
		// reuse a number.
		for range 8 {
			n, err := Alloc[uint32](0, 1024)
			noErr(t, err)
			x, err := ExportIPC(0, n.Ptr(), 4096)
			noErr(t, err)
			if ids[x.ID] {
				t.Fatalf("allocation number %d given twice", x.ID)
			}
			ids[x.ID] = true
			noErr(t, n.Free())
		}
	})
}

// While allocations are shared (ShareAllocations), each is a whole number
// of IPC blocks, so that exporting it exports no neighbour; the Slice
// keeps its length, frees as usual, and the rounding ends with end.
func TestShareAllocations(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		end := ShareAllocations()
		inner := ShareAllocations()
		s, err := Alloc[uint32](0, 25)
		noErr(t, err)
		inner()
		inner() // a second call of one end does nothing
		big, err := Alloc[byte](0, IPCGranularity+1)
		noErr(t, err)
		end()
		plain, err := Alloc[uint32](0, 25)
		noErr(t, err)
		for _, c := range []struct {
			p    uintptr
			n    int64
			want int64
		}{{s.Ptr(), 100, IPCGranularity}, {big.Ptr(), IPCGranularity + 1, 2 * IPCGranularity}, {plain.Ptr(), 100, 100}} {
			r, err := ExportIPC(0, c.p, c.n)
			noErr(t, err)
			if r.Size != c.want || r.Offset != 0 {
				t.Errorf("an allocation of %d bytes is exported as %d at offset %d, want %d", c.n, r.Size, r.Offset, c.want)
			}
		}
		if s.Len() != 25 || big.Len() != IPCGranularity+1 {
			t.Errorf("lengths %d and %d, want 25 and %d", s.Len(), big.Len(), IPCGranularity+1)
		}
		noErr(t, s.Free())
		noErr(t, big.Free())
		noErr(t, plain.Free())
	})
}

// TestRecentExport: ExportIPC's memory of the allocation it found last
// answers for spans inside that allocation while it lives, and never for
// the allocation that takes its address after a Free (a new number), nor
// past the allocation's end.
func TestRecentExport(t *testing.T) {
	var m memTable
	m.addDevice(0x7000, 4096)
	r := IPCRegion{Handle: IPCHandle{1}, Size: 4096, ID: m.ids[0x7000]}
	m.keepRecent(0x7000, r)
	got, ok := m.recentExport(0x7000+40, 64)
	if !ok || got.Offset != 40 || got.ID != r.ID || got.Handle != r.Handle || got.Size != 4096 {
		t.Fatalf("recentExport = %+v, %v; want offset 40 of the allocation %+v", got, ok, r)
	}
	for _, c := range []struct {
		p uintptr
		n int64
	}{{0x7000 - 8, 8}, {0x7000 + 4000, 200}, {0x7000 + 4096, 1}} {
		if _, ok := m.recentExport(c.p, c.n); ok {
			t.Errorf("recentExport(%#x, %d) answered outside the allocation", c.p, c.n)
		}
	}
	if ok, _ := m.takeDevice(0x7000, 4096); !ok {
		t.Fatal("takeDevice")
	}
	if _, ok := m.recentExport(0x7000, 8); ok {
		t.Fatal("recentExport answered for a freed allocation")
	}
	m.addDevice(0x7000, 4096) // the same address again: a new number
	if _, ok := m.recentExport(0x7000, 8); ok {
		t.Fatal("recentExport answered for the allocation that took a freed one's address")
	}
	// A region recorded for an allocation that is gone is not kept.
	m.keepRecent(0x9000, IPCRegion{Size: 64, ID: 99})
	if _, ok := m.recentExport(0x9000, 8); ok {
		t.Fatal("keepRecent kept a region of no live allocation")
	}
}
