package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	fuzzOld = Key{ID: "2026-11", Secret: []byte("the-november-key-of-enough-length-1")}
	fuzzNew = Key{ID: "2026-12", Secret: []byte("the-december-key-of-enough-length-2")}
	// fuzzNow is the clock of every fuzzed token, minted and checked, so that an input found
	// failing fails again.
	fuzzNow  = func() time.Time { return time.Unix(1_764_000_000, 0) }
	fuzzKeys = Keys{Signing: fuzzNew, Verifying: []Key{fuzzOld}, Issuer: "https://id.example", Audience: "checkout",
		MaxLifetime: 2 * time.Hour, now: fuzzNow}
	// fuzzSigners are the keys a fuzzed token is signed with: the two configured ones first, then
	// an unknown kid, a known kid with another secret, and the signing secret without its kid.
	fuzzSigners = []Key{fuzzNew, fuzzOld, {ID: "2026-10", Secret: []byte("the-october-key-of-enough-length-0")},
		{ID: fuzzNew.ID, Secret: []byte("not-the-december-key-but-as-long-2")}, {Secret: fuzzNew.Secret}}
	fuzzAlgs  = []jwt.SigningMethod{jwt.SigningMethodHS256, jwt.SigningMethodHS384, jwt.SigningMethodHS512, jwt.SigningMethodNone}
	fuzzRoles = []string{RoleShopper, RoleSeller, RoleSupport, RoleOps, "admin", ""}
)

// fuzzMint signs claims for p as an identity provider would, with any key and algorithm.
func fuzzMint(signer Key, alg jwt.SigningMethod, p Principal, ttl time.Duration) (string, error) {
	now := fuzzNow()
	c := claims{Role: p.Role, RegisteredClaims: jwt.RegisteredClaims{Subject: strconv.FormatInt(p.UserID, 10),
		Issuer: fuzzKeys.Issuer, Audience: jwt.ClaimStrings{fuzzKeys.Audience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))}}
	if p.SellerID > 0 {
		c.SellerID = sellerID(strconv.FormatInt(p.SellerID, 10))
	}
	t := jwt.NewWithClaims(alg, c)
	if signer.ID != "" {
		t.Header["kid"] = signer.ID
	}
	var key any = signer.Secret
	if alg == jwt.SigningMethodNone {
		key = jwt.UnsafeAllowNoneSignatureType
	}
	return t.SignedString(key)
}

// genuine checks a token independently of the JWT library: HS256 in its header, a configured kid,
// and a signature, in canonical base64url, that is the HMAC of its first two segments under that
// kid's secret.
func genuine(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	enc := base64.RawURLEncoding.Strict()
	raw, err := enc.DecodeString(parts[0])
	if err != nil {
		return false
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if json.Unmarshal(raw, &header) != nil || header.Alg != "HS256" {
		return false
	}
	secret, ok := fuzzKeys.key(header.Kid)
	if !ok {
		return false
	}
	sig, err := enc.DecodeString(parts[2])
	if err != nil || enc.EncodeToString(sig) != parts[2] {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	return hmac.Equal(sig, mac.Sum(nil))
}

// FuzzVerify_AcceptsOnlyGenuineTokens: for any string, the verifier never panics and accepts only
// a token genuinely signed with HS256 under a configured kid.
func FuzzVerify_AcceptsOnlyGenuineTokens(f *testing.F) {
	for i, signer := range fuzzSigners {
		tok, err := fuzzMint(signer, fuzzAlgs[i%len(fuzzAlgs)], Principal{UserID: 7, Role: RoleSeller, SellerID: 42}, time.Hour)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok)
	}
	good, err := fuzzKeys.Mint(Principal{UserID: 7, Role: RoleShopper}, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{good, good + ".", " " + good, strings.TrimRight(good, "=") + "=", "a.b.c", "..", "", "Bearer x",
		"eyJhbGciOiJub25lIn0.eyJzdWIiOiI3In0.", strings.Repeat("e", 300)} {
		f.Add(s)
	}
	v := NewVerifier(fuzzKeys, 1000)
	v.now = fuzzNow
	f.Fuzz(func(t *testing.T, token string) {
		p, err := v.Verify(token)
		if err == nil && !genuine(token) {
			t.Fatalf("accepted %q as %+v", token, p)
		}
	})
}

// FuzzVerify_MintedTokenAndItsMutations: a token is accepted, as the principal it names, only when
// it is HS256 under a configured kid, names a valid principal and lives within the bounds; and
// with any one of its bytes changed to b, no token is accepted.
func FuzzVerify_MintedTokenAndItsMutations(f *testing.F) {
	f.Add(int64(7), uint8(0), int64(0), int64(3600), uint8(0), uint8(0), byte('x'))
	f.Add(int64(1042), uint8(1), int64(42), int64(60), uint8(1), uint8(0), byte('A'))
	f.Add(int64(1042), uint8(1), int64(0), int64(60), uint8(0), uint8(0), byte('.'))
	f.Add(int64(9), uint8(2), int64(0), int64(7200), uint8(0), uint8(1), byte('='))
	f.Add(int64(9), uint8(3), int64(0), int64(-3600), uint8(2), uint8(3), byte(0))
	f.Add(int64(0), uint8(4), int64(-1), int64(30*24*3600), uint8(3), uint8(2), byte('_'))
	f.Add(int64(-5), uint8(5), int64(0), int64(10), uint8(4), uint8(0), byte('-'))
	v := NewVerifier(fuzzKeys, 1000)
	v.now = fuzzNow
	f.Fuzz(func(t *testing.T, userID int64, role uint8, sellerID int64, ttlSeconds int64, signer, alg uint8, b byte) {
		p := Principal{UserID: userID, Role: fuzzRoles[int(role)%len(fuzzRoles)], SellerID: sellerID}
		ttl := time.Duration(ttlSeconds%(10*24*3600)) * time.Second
		si, ai := int(signer)%len(fuzzSigners), int(alg)%len(fuzzAlgs)
		tok, err := fuzzMint(fuzzSigners[si], fuzzAlgs[ai], p, ttl)
		if err != nil {
			t.Fatal(err)
		}

		wellFormed := si < 2 && ai == 0 && p.UserID > 0 && ValidRole(p.Role) && (p.Role != RoleSeller || p.SellerID > 0)
		living := ttl > -leeway && ttl <= fuzzKeys.MaxLifetime+leeway
		want := Principal{UserID: p.UserID, Role: p.Role}
		if p.Role == RoleSeller {
			want.SellerID = p.SellerID
		}
		for range 2 { // in full, then as remembered
			got, err := v.Verify(tok)
			switch {
			case wellFormed && living && (err != nil || got != want):
				t.Fatalf("refused or misread a good token (%v, %+v): %q", err, got, tok)
			case (!wellFormed || !living) && err == nil:
				t.Fatalf("accepted %q (signer %d, alg %s, %+v, ttl %s)", tok, si, fuzzAlgs[ai].Alg(), p, ttl)
			}
		}

		for i := range len(tok) {
			if tok[i] == b {
				continue
			}
			changed := tok[:i] + string([]byte{b}) + tok[i+1:]
			if _, err := v.Verify(changed); err == nil {
				t.Fatalf("accepted %q, byte %d of %q changed", changed, i, tok)
			}
		}
	})
}
