package auth

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVerifier_RemembersAcceptedTokensUntilTheirExpiry(t *testing.T) {
	t.Parallel()
	v := NewVerifier(Keys{Signing: Key{Secret: secret}}, 10)
	clock := time.Now()
	v.now = func() time.Time { return clock }
	tok, err := Mint(secret, Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)

	for range 3 {
		p, err := v.Verify(tok)
		require.NoError(t, err)
		assert.Equal(t, Principal{UserID: 7, Role: RoleShopper}, p)
	}
	hits, misses, held := v.Stats()
	assert.Equal(t, [3]uint64{2, 1, 1}, [3]uint64{hits, misses, uint64(held)}, "checked in full once")

	clock = clock.Add(time.Hour + time.Second) // past exp by the cache's clock (the full check reads the real one)
	_, err = v.Verify(tok)
	require.NoError(t, err)
	hits, misses, _ = v.Stats()
	assert.Equal(t, [2]uint64{2, 2}, [2]uint64{hits, misses}, "past its exp a token is checked in full again")

	v.now = time.Now
	stale := NewVerifier(Keys{Signing: Key{Secret: secret}}, 10)
	expired, err := Mint(secret, Principal{UserID: 7, Role: RoleShopper}, -time.Hour)
	require.NoError(t, err)
	_, err = stale.Verify(expired)
	require.Error(t, err)
}

func TestVerifier_NeverRemembersFailures(t *testing.T) {
	t.Parallel()
	v := NewVerifier(Keys{Signing: Key{Secret: secret}}, 10)
	good, err := Mint(secret, Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	forged, err := Mint([]byte("another-secret-of-enough-length"), Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	_, err = v.Verify(good)
	require.NoError(t, err)

	for _, bad := range []string{forged, good + "x", good[:len(good)-2], "garbage"} {
		for range 2 {
			_, err := v.Verify(bad)
			assert.Error(t, err, bad)
		}
	}
	hits, misses, held := v.Stats()
	assert.Zero(t, hits, "a token differing from an accepted one in any byte is checked in full")
	assert.EqualValues(t, 9, misses)
	assert.Equal(t, 1, held)
}

func TestVerifier_Bounded(t *testing.T) {
	t.Parallel()
	v := NewVerifier(Keys{Signing: Key{Secret: secret}}, 5)
	for i := range 50 {
		tok, err := Mint(secret, Principal{UserID: int64(i + 1), Role: RoleShopper}, time.Hour)
		require.NoError(t, err)
		p, err := v.Verify(tok)
		require.NoError(t, err)
		assert.Equal(t, int64(i+1), p.UserID, strconv.Itoa(i))
		_, _, held := v.Stats()
		assert.LessOrEqual(t, held, 5)
	}
	off := NewVerifier(Keys{Signing: Key{Secret: secret}}, 0)
	tok, err := Mint(secret, Principal{UserID: 1, Role: RoleShopper}, time.Hour)
	require.NoError(t, err)
	for range 2 {
		_, err = off.Verify(tok)
		require.NoError(t, err)
	}
	hits, misses, held := off.Stats()
	assert.Equal(t, [3]uint64{0, 2, 0}, [3]uint64{hits, misses, uint64(held)})
}
