package conformance

import (
	"errors"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// probeCases check Probe and Iprobe. A backend that cannot probe (nccl
// without checks) answers ErrNotSupported; the case then receives the
// messages without probing, so every rank ends the same way.
func probeCases() []Case {
	return []Case{
		{Name: "Probe/UnknownSize", MinRanks: 2, Run: probeUnknownSize},
		{Name: "Probe/Iprobe", MinRanks: 2, Run: probeIprobe},
	}
}

// probeSizes are the counts rank r sends with tags 5 and 6: sizes rank 0
// learns by probing (the second, 512 KiB and more, waits for its receive
// on tcp).
func probeSizes(r int) (small, large int) { return r*1000 + 3, 1<<16 + r }

// probeUnsupported reports whether err is a backend's refusal to probe,
// which only tcp may not give.
func probeUnsupported(t T, c *mp.Comm, err error) bool {
	t.Helper()
	if err != nil && !hostBackend(c) && errors.Is(err, mp.ErrNotSupported) {
		t.Logf("backend %s does not probe here: %v", c.Backend(), err)
		return true
	}
	return false
}

// probeUnknownSize: every other rank sends rank 0 two messages of sizes
// rank 0 does not know; rank 0 probes each (the later tag first), makes a
// buffer of the size the probe gives, and receives into it exactly.
func probeUnknownSize(t T, c *mp.Comm) {
	if c.Rank() != 0 {
		// Non-blocking: rank 0 probes the second message before it
		// receives the first, so a blocking send of the first (which may
		// wait for its receive, past the eager limit) would never return.
		small, large := probeSizes(c.Rank())
		a := mp.Isend(c, words(small, uint64(c.Rank())), 0, 5)
		b := mp.Isend(c, words(large, uint64(100+c.Rank())), 0, 6)
		require.NoError(t, mp.WaitAll(a, b))
		return
	}
	for _, src := range others(c) {
		small, large := probeSizes(src)
		sizes := map[int]int{5: small, 6: large}
		probed := true
		for _, tag := range []int{6, 5} {
			st, err := mp.Probe(c, src, tag)
			if probeUnsupported(t, c, err) {
				probed = false
				break
			}
			require.NoError(t, err)
			if st.Source != src || st.Tag != tag || st.Count != int64(sizes[tag]) {
				t.Errorf("Probe(%d, %d): %+v, want %d elements", src, tag, st, sizes[tag])
			}
		}
		for _, tag := range []int{5, 6} { // in sending order: a backend without tags needs it
			buf := make([]uint64, sizes[tag])
			st, err := mp.Recv(c, buf, src, tag)
			require.NoError(t, err)
			require.Equal(t, int64(sizes[tag]), st.Count)
			seed := uint64(src)
			if tag == 6 {
				seed += 100
			}
			checkWords(t, "the probed message", buf, seed)
		}
		if probed {
			// Nothing is left; the sender may have closed meanwhile.
			if found, _, err := mp.Iprobe(c, src, 5); found || (err != nil && !errors.Is(err, mp.ErrPeerLost)) {
				t.Errorf("Iprobe after the receives: %v, %v", found, err)
			}
		}
	}
}

// probeIprobe: Iprobe finds nothing before rank 1 sends, then finds the
// message (polling, bounded), twice (it stays), and the receive takes it.
func probeIprobe(t T, c *mp.Comm) {
	switch c.Rank() {
	case 0:
		found, _, err := mp.Iprobe(c, 1, 9)
		unsupported := probeUnsupported(t, c, err)
		if !unsupported {
			require.NoError(t, err)
			if found {
				t.Errorf("Iprobe found a message before it was sent")
			}
		}
		tell(t, c, true, 1)
		if !unsupported {
			deadline := time.Now().Add(pollLimit)
			for !found && time.Now().Before(deadline) {
				var st mp.Status
				found, st, err = mp.Iprobe(c, 1, 9)
				require.NoError(t, err)
				if found && (st.Source != 1 || st.Tag != 9 || st.Count != 2) {
					t.Errorf("Iprobe: %+v", st)
				}
				if !found {
					time.Sleep(100 * time.Microsecond)
				}
			}
			if !found {
				t.Errorf("Iprobe never found the message")
			}
			if again, _, _ := mp.Iprobe(c, 1, 9); !again {
				t.Errorf("a second Iprobe lost the message")
			}
		}
		buf := []int32{0, 0}
		_, err = mp.Recv(c, buf, 1, 9)
		require.NoError(t, err)
		require.Equal(t, []int32{4, 2}, buf)
	case 1:
		if heard(t, c, 0) {
			require.NoError(t, mp.Send(c, []int32{4, 2}, 0, 9))
		}
	}
}
