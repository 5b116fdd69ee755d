package mp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

func TestSmokeRing(t *testing.T) {
	ranktest.Run(t, 4, func(t *ranktest.T, c *mp.Comm) {
		n := c.Size()
		buf := []int64{int64(c.Rank())}
		got := make([]int64, 1)
		st, err := mp.Sendrecv(c, buf, (c.Rank()+1)%n, 0, got, (c.Rank()+n-1)%n, 0)
		require.NoError(t, err)
		require.Equal(t, int64((c.Rank()+n-1)%n), got[0])
		require.Equal(t, (c.Rank()+n-1)%n, st.Source)
		require.NoError(t, mp.Barrier(c))
	})
}
