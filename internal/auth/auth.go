// Package auth proves that two connections belong to the same job: both
// sides know the job's key, and neither sends it.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
)

// NonceSize is the size of a challenge.
const NonceSize = 16

// MACSize is the size of a proof.
const MACSize = sha256.Size

// Nonce returns a fresh random challenge.
func Nonce() [NonceSize]byte {
	var n [NonceSize]byte
	rand.Read(n[:]) // crypto/rand.Read never fails on supported platforms
	return n
}

// Prove returns HMAC-SHA256(key, context || nonce || extra): what a peer
// sends to show it knows key, bound to the challenge and to the facts it
// claims (its rank, the job size).
func Prove(key, context string, nonce [NonceSize]byte, extra ...[]byte) [MACSize]byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(context))
	m.Write([]byte{0})
	m.Write(nonce[:])
	for _, e := range extra {
		m.Write(e)
	}
	var out [MACSize]byte
	m.Sum(out[:0])
	return out
}

// Verify checks a proof in constant time.
func Verify(key, context string, nonce [NonceSize]byte, mac []byte, extra ...[]byte) bool {
	want := Prove(key, context, nonce, extra...)
	return hmac.Equal(want[:], mac)
}
