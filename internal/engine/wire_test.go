package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
)

// A sealed header verifies and decodes to what was encoded; any flipped
// bit of it fails the check with ErrCorrupt.
func TestHeaderCheck(t *testing.T) {
	h := Header{Kind: KindRTS, Type: backend.Float64, Flags: RTSPull, Tag: 12, Count: 1 << 30, Seq: 77, SID: 5, Comm: 0xdeadbeef}
	var b [HeaderSize]byte
	h.Encode(&b)
	Seal(&b)
	require.NoError(t, Verify(b[:]))
	got, err := DecodeHeader(b[:], EagerLimit)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	for bit := range 8 * HeaderSize {
		c := b
		c[bit/8] ^= 1 << (bit % 8)
		assert.ErrorIs(t, Verify(c[:]), backend.ErrCorrupt, "bit %d flipped", bit)
	}
	_, err = DecodeHeader((&Header{Kind: KindLeave}).bytes(), EagerLimit)
	assert.ErrorIs(t, err, ErrFrame, "LEAVE of the world")
	_, err = DecodeHeader((&Header{Kind: KindLeave, Flags: LeaveRevoke, Tag: 3}).bytes(), EagerLimit)
	assert.NoError(t, err, "the world's revoke")
}

func (h *Header) bytes() []byte {
	var b [HeaderSize]byte
	h.Encode(&b)
	return b[:]
}

// BenchmarkHeader is what a frame's header costs each way: encode, then
// decode (the shared-memory ring), and with the check word a TCP frame
// carries (seal before writing, verify before decoding).
func BenchmarkHeader(b *testing.B) {
	for _, checked := range []bool{false, true} {
		name := "plain"
		if checked {
			name = "checked"
		}
		b.Run(name, func(b *testing.B) {
			h := Header{Kind: KindEager, Type: backend.Float32, Tag: 3, Count: 16, Comm: 9}
			var buf [HeaderSize]byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h.Seq = uint64(i)
				h.Encode(&buf)
				if checked {
					Seal(&buf)
					if err := Verify(buf[:]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := DecodeHeader(buf[:], EagerLimit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
