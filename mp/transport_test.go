package mp_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// TestTransportPerPeer: on the host backend, ranks of one host reach each
// other through shared memory, unless COURIER_TRANSPORTS=tcp; the tcp
// backend uses TCP for every pair.
func TestTransportPerPeer(t *testing.T) {
	for _, tc := range []struct {
		backend, transports, want string
	}{
		{"host", "", "shm"},
		{"host", "shm", "shm"},
		{"host", "tcp", "tcp"},
		{"host", "tcp,shm", "shm"},
		{"tcp", "", "tcp"},
	} {
		t.Run(tc.backend+"/"+tc.transports, func(t *testing.T) {
			env := func(k string) string {
				if k == "COURIER_TRANSPORTS" {
					return tc.transports
				}
				return ""
			}
			cfg := ranktest.Config{Backend: tc.backend, Options: []mp.Option{mp.WithEnv(env)}}
			ranktest.RunConfig(t, 3, cfg, func(rt *ranktest.T, c *mp.Comm) {
				for r := range c.Size() {
					want := tc.want
					if r == c.Rank() {
						want = "self"
					}
					assert.Equal(rt, want, c.Transport(r), "rank %d to rank %d", c.Rank(), r)
				}
				assert.Equal(rt, "", c.Transport(c.Size()))
				// Traffic flows whatever the path.
				next, prev := (c.Rank()+1)%c.Size(), (c.Rank()+c.Size()-1)%c.Size()
				got := make([]int32, 1000)
				out := make([]int32, 1000)
				for i := range out {
					out[i] = int32(c.Rank()*1000 + i)
				}
				_, err := mp.Sendrecv(c, out, next, 1, got, prev, 1)
				assert.NoError(rt, err)
				assert.Equal(rt, int32(prev*1000+999), got[999])
			})
		})
	}
}

// TestTransportsInvalid: an unknown name in COURIER_TRANSPORTS is
// ErrInvalid at Init, naming the transports there are.
func TestTransportsInvalid(t *testing.T) {
	jobs, err := ranktest.Jobs(1)
	assert.NoError(t, err)
	defer jobs[0].Listener.Close()
	_, err = mp.Init(t.Context(), mp.WithJob(jobs[0]), mp.WithBackend("host"),
		mp.WithEnv(func(k string) string {
			if k == "COURIER_TRANSPORTS" {
				return "shm,udp"
			}
			return ""
		}))
	assert.ErrorIs(t, err, mp.ErrInvalid)
	assert.ErrorContains(t, err, `unknown transport "udp" (have shm, tcp)`)
}
