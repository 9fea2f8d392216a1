package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The provider's signing keys are RSA keys (RS256, which every verifier of the checkout takes:
// Temporal's JWT key provider, the API's go-oidc), one PEM file each in <dir>/keys, named by its
// kid: k<UTC time of making>, so that names sort by age. Every key in the folder is published in
// the JWKS; tokens are signed with the newest key published for at least publishLead, so that
// verifiers that poll the JWKS (Temporal's every minute) know a new key before the first token it
// signs. Removing a file retires its key.
const keysDir = "keys"

// kidLayout is the time in a kid.
const kidLayout = "20060102T150405Z"

type keyRing struct {
	dir         string
	publishLead time.Duration
	now         func() time.Time

	mu     sync.Mutex
	read   time.Time
	keys   []signingKey // oldest first
	reload time.Duration
}

type signingKey struct {
	kid  string
	made time.Time
	key  *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.kid }

// publicKey is a key as the JWKS shows it.
type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

var (
	_ op.SigningKey = signingKey{}
	_ op.Key        = publicKey{}
)

// all reads the folder again when its last read is older than reload: a key added or removed by
// hand reaches the JWKS without a restart.
func (r *keyRing) all() ([]signingKey, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys != nil && r.now().Sub(r.read) < r.reload {
		return r.keys, nil
	}
	keys, err := readKeys(filepath.Join(r.dir, keysDir))
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no signing key in %s (oidc-provider rotate-key makes one)", filepath.Join(r.dir, keysDir))
	}
	r.keys, r.read = keys, r.now()
	return keys, nil
}

// signing is the newest key published for publishLead, else (a first start) the oldest there is.
func (r *keyRing) signing() (signingKey, error) {
	keys, err := r.all()
	if err != nil {
		return signingKey{}, err
	}
	now := r.now()
	for i := len(keys) - 1; i >= 0; i-- {
		if now.Sub(keys[i].made) >= r.publishLead {
			return keys[i], nil
		}
	}
	return keys[0], nil
}

func readKeys(dir string) ([]signingKey, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var keys []signingKey
	for _, e := range entries {
		kid, ok := strings.CutSuffix(e.Name(), ".pem")
		if !ok || e.IsDir() {
			continue
		}
		made, err := time.Parse(kidLayout, strings.TrimPrefix(kid, "k"))
		if err != nil {
			return nil, fmt.Errorf("%s: a key file is named k<%s>.pem", e.Name(), kidLayout)
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM block", e.Name())
		}
		parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		rsaKey, ok := parsed.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%s: not an RSA key", e.Name())
		}
		keys = append(keys, signingKey{kid: kid, made: made, key: rsaKey})
	}
	slices.SortFunc(keys, func(a, b signingKey) int { return a.made.Compare(b.made) })
	return keys, nil
}

// makeKey writes a new RSA key into dir/keys, named by the time now; owner-only.
func makeKey(dir string, now time.Time) (string, error) {
	d := filepath.Join(dir, keysDir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	kid := "k" + now.UTC().Format(kidLayout)
	f, err := os.OpenFile(filepath.Join(d, kid+".pem"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	return kid, errors.Join(err, f.Close())
}

// ensureKey makes the first key when the folder has none.
func ensureKey(dir string, now time.Time) error {
	keys, err := readKeys(filepath.Join(dir, keysDir))
	if err != nil || len(keys) > 0 {
		return err
	}
	_, err = makeKey(dir, now)
	return err
}
