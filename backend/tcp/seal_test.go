package tcp

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/auth"
)

// openSealed runs Open for n ranks of the tcp driver, rank r with
// COURIER_ENCRYPT=seal[r].
func openSealed(ctx context.Context, seal []string) ([]backend.Conn, []error) {
	return openAllEnv(ctx, len(seal), "a secret of the job", newHub(len(seal), nil), func(r int) func(string) string {
		return func(k string) string {
			if k == SealEnv {
				return seal[r]
			}
			return ""
		}
	})
}

// A job with sealed links: small messages go round the ring, and a large
// one (DATA chunks, each sealed in several records) arrives whole.
func TestSealedLinks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conns, errs := openSealed(ctx, []string{"1", "1", "1"})
	for _, err := range errs {
		require.NoError(t, err)
	}
	defer closeConns(conns)
	ringWorks(t, conns)

	big := make([]byte, 5<<20+7)
	for i := range big {
		big[i] = byte(i*7 + i>>9)
	}
	got := make([]byte, len(big))
	rq, err := conns[2].Irecv(bufOf(got, backend.Uint8), 0, 9, 0)
	require.NoError(t, err)
	sq, err := conns[0].Isend(bufOf(big, backend.Uint8), 2, 9, 0)
	require.NoError(t, err)
	_, err = sq.Wait(10 * time.Second)
	require.NoError(t, err)
	_, err = rq.Wait(10 * time.Second)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(big, got), "the large message arrived altered")
}

// Ranks that disagree on COURIER_ENCRYPT are refused with a message
// that names the setting, not taken for another job.
func TestSealMismatchRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conns, errs := openSealed(ctx, []string{"1", "0"})
	defer closeConns(conns)
	require.Error(t, errs[1])
	assert.Contains(t, errs[1].Error(), "has COURIER_ENCRYPT=0 and rank 0 has COURIER_ENCRYPT=1: set COURIER_ENCRYPT alike on every rank")
	require.Error(t, errs[0])
}

func TestParseSeal(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "on": true, " off ": false} {
		got, err := parseSeal(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	_, err := parseSeal("yes please")
	assert.ErrorIs(t, err, backend.ErrInvalid)
	assert.ErrorContains(t, err, "COURIER_ENCRYPT")
}

// sealedPair is two sealed ends over a pipe whose bytes the test sees:
// what a writes goes through tap, which may alter it, to b.
func sealedPair(t *testing.T, tap func(rec []byte) []byte) (a, b *sealedConn) {
	t.Helper()
	a0, a1 := net.Pipe()
	b0, b1 := net.Pipe()
	s := session{acc: auth.Nonce(), dial: auth.Nonce()}
	var err error
	a, err = newSealedConn(a0, "k", s, true)
	require.NoError(t, err)
	b, err = newSealedConn(b1, "k", s, false)
	require.NoError(t, err)
	go func() { // the relay: record by record
		defer b0.Close()
		for {
			var lb [4]byte
			if _, err := io.ReadFull(a1, lb[:]); err != nil {
				return
			}
			body := make([]byte, int(lb[0])<<24|int(lb[1])<<16|int(lb[2])<<8|int(lb[3]))
			if _, err := io.ReadFull(a1, body); err != nil {
				return
			}
			rec := tap(append(lb[:], body...))
			if _, err := b0.Write(rec); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { a.Close(); b.Close(); a1.Close() })
	return a, b
}

// What a sealed connection puts on the wire hides its bytes, and a
// record altered, replayed or dropped on the way is ErrCorrupt at the
// reader, never data.
func TestSealedRecords(t *testing.T) {
	t.Parallel()
	msg := bytes.Repeat([]byte("courier plain text "), 1000)
	t.Run("hidden", func(t *testing.T) {
		var seen bytes.Buffer
		var mu sync.Mutex
		a, b := sealedPair(t, func(rec []byte) []byte { mu.Lock(); seen.Write(rec); mu.Unlock(); return rec })
		go a.writev(msg[:40], msg[40:])
		got := make([]byte, len(msg))
		_, err := io.ReadFull(b, got)
		require.NoError(t, err)
		assert.Equal(t, msg, got)
		mu.Lock()
		defer mu.Unlock()
		assert.NotContains(t, seen.String(), "courier plain")
		assert.Equal(t, len(msg)+4+sealTag, seen.Len(), "one record for a header and its payload")
	})
	for name, tap := range map[string]func() func([]byte) []byte{
		"a flipped byte": func() func([]byte) []byte {
			return func(rec []byte) []byte { rec[len(rec)/2] ^= 1; return rec }
		},
		"a replayed record": func() func([]byte) []byte {
			var first []byte
			return func(rec []byte) []byte {
				if first == nil {
					first = append([]byte(nil), rec...)
					return rec
				}
				return first
			}
		},
		"a dropped record": func() func([]byte) []byte {
			n := 0
			return func(rec []byte) []byte {
				if n++; n == 1 {
					return nil
				}
				return rec
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := sealedPair(t, tap())
			go func() {
				a.Write([]byte("first record"))
				a.Write([]byte("second record"))
			}()
			buf := make([]byte, 64)
			var err error
			var read []byte
			for err == nil && len(read) < len("first recordsecond record") {
				var n int
				n, err = b.Read(buf)
				read = append(read, buf[:n]...)
			}
			require.ErrorIs(t, err, backend.ErrCorrupt)
			assert.NotContains(t, string(read), "second record")
		})
	}
}
