package auth_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/internal/auth"
)

func TestGuestTokens_OwnTokensOnly(t *testing.T) {
	t.Parallel()
	old := auth.Key{ID: "k1", Secret: []byte(strings.Repeat("o", 32))}
	cur := auth.Key{ID: "k2", Secret: []byte(strings.Repeat("c", 32))}
	before := auth.NewGuestTokens(auth.Keys{Signing: old})
	g := auth.NewGuestTokens(auth.Keys{Signing: cur, Verifying: []auth.Key{old}})
	stranger := auth.NewGuestTokens(auth.Keys{Signing: auth.Key{Secret: []byte(strings.Repeat("s", 32))}})

	tok := g.Issue()
	assert.True(t, g.Valid(tok))
	assert.NotEqual(t, tok, g.Issue(), "each token is new")
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	assert.NoError(t, err)
	assert.Len(t, raw, 32, "128 random bits and a 128-bit tag")

	flipped := []byte(tok)
	flipped[3] ^= 1
	cases := map[string]string{
		"made up, well formed":  base64.RawURLEncoding.EncodeToString(make([]byte, 32)),
		"one character changed": string(flipped),
		"another server's":      stranger.Issue(),
		"too short":             tok[:42],
		"not base64":            strings.Repeat("*", 43),
		"a member cart's id":    "u:7",
		"empty":                 "",
		"issued, with a suffix": tok + "A",
	}
	for name, bad := range cases {
		assert.False(t, g.Valid(bad), name)
	}
	assert.True(t, g.Valid(before.Issue()), "a token issued under a secret still listed in AUTH_JWT_KEYS")
}

// TestGuestTokens_OnlyTheIssuedSpellingIsValid: the last character of a token holds two bits a
// lenient base64 decoder drops; a token with that character changed is one the server never issued.
func TestGuestTokens_OnlyTheIssuedSpellingIsValid(t *testing.T) {
	t.Parallel()
	g := auth.NewGuestTokens(auth.Keys{Signing: auth.Key{Secret: []byte(strings.Repeat("k", 32))}})
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for range 20 {
		tok := g.Issue()
		if !g.Valid(tok) {
			t.Fatalf("issued token %q not valid", tok)
		}
		for _, c := range alphabet {
			if byte(c) == tok[len(tok)-1] {
				continue
			}
			if other := tok[:len(tok)-1] + string(c); g.Valid(other) {
				t.Fatalf("%q, the issued %q with its last character changed, is valid", other, tok)
			}
		}
	}
}
