// Package auth mints and verifies the API's bearer tokens: HS256 JWTs with the user id in sub, a
// role, and a seller id for sellers.
package auth

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Roles of the API.
const (
	RoleShopper = "shopper"
	RoleSeller  = "seller"
	RoleSupport = "support"
	RoleOps     = "ops"
)

// ValidRole reports whether r is one of the roles.
func ValidRole(r string) bool {
	switch r {
	case RoleShopper, RoleSeller, RoleSupport, RoleOps:
		return true
	}
	return false
}

// Principal is who a verified token speaks for.
type Principal struct {
	UserID   int64
	Role     string
	SellerID int64
}

type claims struct {
	Role     string `json:"role"`
	SellerID string `json:"seller_id,omitempty"`
	jwt.RegisteredClaims
}

// Mint signs a token for p valid for ttl.
func Mint(secret []byte, p Principal, ttl time.Duration) (string, error) {
	if !ValidRole(p.Role) {
		return "", fmt.Errorf("unknown role %q", p.Role)
	}
	if p.UserID <= 0 {
		return "", errors.New("user id must be positive")
	}
	if p.Role == RoleSeller && p.SellerID <= 0 {
		return "", errors.New("a seller token needs a seller id")
	}
	now := time.Now()
	c := claims{Role: p.Role, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(p.UserID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	if p.SellerID > 0 {
		c.SellerID = strconv.FormatInt(p.SellerID, 10)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verify checks the signature (HS256 only), expiry and claims of a token.
func Verify(secret []byte, token string) (Principal, error) {
	p, _, err := verify(secret, token)
	return p, err
}

// verify is Verify, also returning the token's expiry.
func verify(secret []byte, token string) (Principal, time.Time, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithLeeway(30*time.Second))
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Principal{}, time.Time{}, errors.New("sub must be a positive decimal user id")
	}
	if !ValidRole(c.Role) {
		return Principal{}, time.Time{}, fmt.Errorf("unknown role %q", c.Role)
	}
	p := Principal{UserID: uid, Role: c.Role}
	if c.Role == RoleSeller {
		if p.SellerID, err = strconv.ParseInt(c.SellerID, 10, 64); err != nil || p.SellerID <= 0 {
			return Principal{}, time.Time{}, errors.New("a seller token needs a decimal seller_id")
		}
	}
	return p, c.ExpiresAt.Time, nil
}
