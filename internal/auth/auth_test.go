package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var secret = []byte("test-secret-of-enough-length")

const base64url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

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
		// The last character of an HS256 signature carries two unused bits.
		"signature's unused bits set": good[:len(good)-1] + string(base64url[strings.IndexByte(base64url, good[len(good)-1])^1]),
	} {
		_, err := Verify(secret, tok)
		assert.Error(t, err, name)
	}
}

func TestKeys_RotationByKid_OldTokensStillAcceptedWhileTheirKeyIsListed(t *testing.T) {
	t.Parallel()
	oldKey := Key{ID: "2026-11", Secret: []byte("the-november-key-of-enough-length-1")}
	newKey := Key{ID: "2026-12", Secret: []byte("the-december-key-of-enough-length-2")}
	before := Keys{Signing: oldKey}
	during := Keys{Signing: newKey, Verifying: []Key{oldKey}}
	after := Keys{Signing: newKey}

	oldTok, err := before.Mint(Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	newTok, err := during.Mint(Principal{UserID: 8, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)

	_, err = during.Verify(oldTok)
	assert.NoError(t, err, "a session signed with the old key lives on while it is listed")
	p, err := during.Verify(newTok)
	require.NoError(t, err)
	assert.Equal(t, int64(8), p.UserID)
	_, err = after.Verify(oldTok)
	assert.Error(t, err, "the old key retired: its tokens end")
	_, err = Keys{Signing: Key{Secret: oldKey.Secret}}.Verify(oldTok)
	assert.Error(t, err, "a kid names its key: the same secret under no kid does not match")
}

func TestKeys_IssuerAudienceAndLifetime(t *testing.T) {
	t.Parallel()
	k := Keys{Signing: Key{Secret: secret}, Issuer: "https://id.example", Audience: "checkout", MaxLifetime: 2 * time.Hour}
	good, err := k.Mint(Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	_, err = k.Verify(good)
	require.NoError(t, err)

	otherIssuer := k
	otherIssuer.Issuer = "https://elsewhere.example"
	fromElsewhere, err := otherIssuer.Mint(Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	otherAudience := k
	otherAudience.Audience = "another-service"
	forOthers, err := otherAudience.Mint(Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	tooLong, err := k.Mint(Principal{UserID: 7, Role: RoleShopper}, 30*24*time.Hour)
	require.NoError(t, err)
	noIssuer, err := Mint(secret, Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)

	for name, tok := range map[string]string{"other issuer": fromElsewhere, "other audience": forOthers,
		"lives a month": tooLong, "no issuer or audience": noIssuer} {
		_, err := k.Verify(tok)
		assert.Error(t, err, name)
	}
}

func TestVerify_SellerIDAsNumberOrString(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(time.Hour).Unix()
	for name, sellerID := range map[string]any{"string": "42", "number": 42} {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "1042", "role": "seller",
			"seller_id": sellerID, "exp": exp}).SignedString(secret)
		require.NoError(t, err)
		p, err := Verify(secret, tok)
		require.NoError(t, err, name)
		assert.Equal(t, int64(42), p.SellerID, name)
	}
	bad, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "1042", "role": "seller",
		"seller_id": 4.2, "exp": exp}).SignedString(secret)
	require.NoError(t, err)
	_, err = Verify(secret, bad)
	assert.Error(t, err, "not a whole number")
}
