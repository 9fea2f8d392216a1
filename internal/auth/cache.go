package auth

import (
	"sync"
	"sync/atomic"
	"time"
)

// Verifier verifies bearer tokens with the keys, and remembers the tokens it accepted, each
// until its own expiry, so that a shopper's next request skips the signature check (about a tenth
// of a cart read's CPU). Only accepted tokens are remembered, under the whole token string: a
// token is served from memory only if it is byte for byte one that passed the full check before,
// and never after its exp. Failures are never remembered. The number of tokens held is bounded;
// past it, expired tokens go first, then random ones (a tenth of the bound at a time).
type Verifier struct {
	keys Keys
	max  int
	now  func() time.Time

	mu     sync.RWMutex
	tokens map[string]verified

	hits, misses atomic.Uint64
}

type verified struct {
	p   Principal
	exp time.Time
}

// NewVerifier returns a verifier for keys that remembers up to maxTokens accepted tokens (0: none,
// every token is checked in full).
func NewVerifier(keys Keys, maxTokens int) *Verifier {
	return &Verifier{keys: keys, max: max(maxTokens, 0), now: time.Now, tokens: map[string]verified{}}
}

// Verify is Keys.Verify, answered from memory for a token accepted before and not yet
// expired.
func (v *Verifier) Verify(token string) (Principal, error) {
	if v.max > 0 {
		v.mu.RLock()
		e, ok := v.tokens[token]
		v.mu.RUnlock()
		if ok && v.now().Before(e.exp) {
			v.hits.Add(1)
			return e.p, nil
		}
	}
	v.misses.Add(1)
	p, exp, err := v.keys.verify(token)
	if err != nil || v.max == 0 {
		return p, err
	}
	now := v.now()
	if !now.Before(exp) { // accepted only thanks to the leeway: check it in full every time
		return p, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.tokens) >= v.max {
		for t, e := range v.tokens {
			if !now.Before(e.exp) {
				delete(v.tokens, t)
			}
		}
		// Make room for a tenth at once, so that a full cache scans once per many inserts.
		for t := range v.tokens { // map order is random enough for random eviction
			if len(v.tokens) <= v.max-v.max/10-1 {
				break
			}
			delete(v.tokens, t)
		}
	}
	v.tokens[token] = verified{p: p, exp: exp}
	return p, nil
}

// VerifyUntil is Keys.VerifyUntil: a token checked in full, with its expiry (a session's end).
func (v *Verifier) VerifyUntil(token string) (Principal, time.Time, error) {
	return v.keys.verify(token)
}

// Stats are how many verifications were answered from memory and how many in full.
func (v *Verifier) Stats() (hits, misses uint64, held int) {
	v.mu.RLock()
	held = len(v.tokens)
	v.mu.RUnlock()
	return v.hits.Load(), v.misses.Load(), held
}
