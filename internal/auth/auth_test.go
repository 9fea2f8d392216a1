package auth

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var secret = []byte("test-secret-of-enough-length")

func TestMintVerify_RoundTrip(t *testing.T) {
	t.Parallel()
	tok, err := Mint(secret, Principal{UserID: 7, Role: RoleSeller, SellerID: 42}, time.Hour)
	require.NoError(t, err)
	p, err := Verify(secret, tok)
	require.NoError(t, err)
	assert.Equal(t, Principal{UserID: 7, Role: RoleSeller, SellerID: 42}, p)
}

func TestVerify_RejectsBadTokens(t *testing.T) {
	t.Parallel()
	good, err := Mint(secret, Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	expired, err := Mint(secret, Principal{UserID: 7, Role: RoleShopper}, -time.Hour)
	require.NoError(t, err)
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "7", "role": "shopper", "exp": time.Now().Add(time.Hour).Unix()})
	unsigned, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	noExp, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "7", "role": "shopper"}).SignedString(secret)
	require.NoError(t, err)
	badRole, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "7", "role": "admin", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	require.NoError(t, err)

	for name, tok := range map[string]string{
		"other secret": func() string {
			s, _ := Mint([]byte("another-secret-entirely"), Principal{UserID: 7, Role: RoleShopper}, time.Hour)
			return s
		}(),
		"expired":      expired,
		"alg none":     unsigned,
		"no exp":       noExp,
		"unknown role": badRole,
		"garbage":      "not.a.token",
		"tampered":     good[:len(good)-2] + "xx",
	} {
		_, err := Verify(secret, tok)
		assert.Error(t, err, name)
	}
}
