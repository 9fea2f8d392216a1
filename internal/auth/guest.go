package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
)

// GuestTokens issues the guest cart tokens and recognises its own: 128 random bits followed by a
// 128-bit HMAC-SHA256 tag of them, URL-safe base64 (43 characters). A token nobody issued has no
// valid tag, so a client cannot make one up, nor choose which cart a token names. The tag's key is
// derived from the bearer tokens' secret (AUTH_JWT_SECRET), under a label of its own so that the two
// uses never share a key; the older secrets of AUTH_JWT_KEYS still verify the tokens issued under
// them, so a guest cart outlives a rotation for as long as its old secret stays listed.
type GuestTokens struct {
	keys [][]byte // keys[0] issues; every key verifies
}

const (
	guestIDBytes  = 16
	guestTagBytes = 16
	guestKeyLabel = "checkout guest cart token v1"
)

// NewGuestTokens derives the guest token keys from the bearer tokens' keys.
func NewGuestTokens(k Keys) *GuestTokens {
	g := &GuestTokens{}
	for _, key := range append([]Key{k.Signing}, k.Verifying...) {
		mac := hmac.New(sha256.New, key.Secret)
		mac.Write([]byte(guestKeyLabel))
		g.keys = append(g.keys, mac.Sum(nil))
	}
	return g
}

// Issue makes a new guest token.
func (g *GuestTokens) Issue() string {
	b := make([]byte, guestIDBytes, guestIDBytes+guestTagBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(append(b, tag(g.keys[0], b)...))
}

// Valid reports whether this server issued t.
func (g *GuestTokens) Valid(t string) bool {
	if len(t) != base64.RawURLEncoding.EncodedLen(guestIDBytes+guestTagBytes) {
		return false
	}
	// Strict: the last character carries two bits past the 256, which a lenient decoder ignores,
	// so four spellings would otherwise pass for one token.
	b, err := base64.RawURLEncoding.Strict().DecodeString(t)
	if err != nil {
		return false
	}
	id, got := b[:guestIDBytes], b[guestIDBytes:]
	for _, k := range g.keys {
		if hmac.Equal(got, tag(k, id)) {
			return true
		}
	}
	return false
}

func tag(key, id []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(id)
	return mac.Sum(nil)[:guestTagBytes]
}
