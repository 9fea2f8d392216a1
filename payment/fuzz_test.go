package payment_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/marketplace/checkout/payment"
)

var (
	fuzzSecret = []byte("whsec-fuzz-secret-0123456789abcdef")
	fuzzSentAt = time.Unix(1_764_000_000, 0)
	fuzzEvent  = []byte(`{"id":"evt_1","type":"payment_intent.authorized","intent":{"id":"pi_1","status":"AUTHORIZED"}}`)
)

// signedHere reports whether header holds, among its comma-separated parts, the t part and the
// v1 part Sign makes for body at a second within tolerance of now: what Verify may accept.
func signedHere(header string, body []byte, now time.Time) bool {
	parts := strings.Split(strings.TrimSpace(header), ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	for _, p := range parts {
		v, ok := strings.CutPrefix(p, "t=")
		if !ok {
			continue
		}
		ts, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		at := time.Unix(ts, 0)
		if d := now.Sub(at); d > payment.DefaultTolerance || d < -payment.DefaultTolerance {
			continue
		}
		tPart, v1Part, _ := strings.Cut(payment.Sign(fuzzSecret, body, at), ",")
		if p == tPart && slices.Contains(parts, v1Part) {
			return true
		}
	}
	return false
}

// FuzzVerify_AcceptsOnlyWhatSignMade: for any body, header and clock, Verify never panics, refuses
// with ErrInvalidSignature, and accepts only a header carrying what Sign made for this body and
// secret at a time within tolerance.
func FuzzVerify_AcceptsOnlyWhatSignMade(f *testing.F) {
	good := payment.Sign(fuzzSecret, fuzzEvent, fuzzSentAt)
	f.Add(fuzzEvent, good, int64(0))
	f.Add(fuzzEvent, good, int64(300))
	f.Add(fuzzEvent, good, int64(-301))
	f.Add(fuzzEvent, " "+good+" ", int64(1))
	f.Add(fuzzEvent, good+",v1="+strings.Repeat("ab", 32), int64(0))
	f.Add(fuzzEvent, "v1="+strings.Repeat("0", 64)+","+good, int64(0))
	f.Add(fuzzEvent, "t=1764000000,"+good, int64(0))
	f.Add(fuzzEvent, "t=1764000000", int64(0))
	f.Add(fuzzEvent, "t=1764000000,v1=", int64(0))
	f.Add(fuzzEvent, "t=-9223372036854775808,v1="+strings.Repeat("ab", 32), int64(0))
	f.Add([]byte{}, payment.Sign(fuzzSecret, nil, fuzzSentAt), int64(0))
	f.Add([]byte("\x00\xff"), "", int64(0))
	f.Fuzz(func(t *testing.T, body []byte, header string, skew int64) {
		now := fuzzSentAt.Add(time.Duration(skew) * time.Second)
		err := payment.Verify(fuzzSecret, body, header, now, 0)
		if err != nil {
			if !errors.Is(err, payment.ErrInvalidSignature) {
				t.Fatalf("refused with %v, not ErrInvalidSignature", err)
			}
			return
		}
		if !signedHere(header, body, now) {
			t.Fatalf("accepted header %q for body %q at %d", header, body, now.Unix())
		}
	})
}

// FuzzVerify_FlippedByteRefused: what Sign made verifies within tolerance, under that secret only;
// with any one byte of the body or of the header changed to b, it is refused.
func FuzzVerify_FlippedByteRefused(f *testing.F) {
	f.Add(fuzzEvent, int64(0), byte('u'))
	f.Add(fuzzEvent, int64(299), byte('X'))
	f.Add(fuzzEvent, int64(-299), byte(','))
	f.Add(fuzzEvent, int64(0), byte(' '))
	f.Add([]byte{}, int64(1), byte('0'))
	f.Fuzz(func(t *testing.T, body []byte, skew int64, b byte) {
		header := payment.Sign(fuzzSecret, body, fuzzSentAt)
		now := fuzzSentAt.Add(time.Duration(skew%300) * time.Second)
		if err := payment.Verify(fuzzSecret, body, header, now, 0); err != nil {
			t.Fatalf("Sign's own header refused: %v", err)
		}
		if payment.Verify([]byte("another-secret-0123456789abcdef"), body, header, now, 0) == nil {
			t.Fatal("accepted under another secret")
		}
		changed := append([]byte(nil), body...)
		for i := range changed {
			if changed[i] == b {
				continue
			}
			changed[i] = b
			if payment.Verify(fuzzSecret, changed, header, now, 0) == nil {
				t.Fatalf("accepted body %q under the header of %q", changed, body)
			}
			changed[i] = body[i]
		}
		for i := range len(header) {
			if header[i] == b {
				continue
			}
			h := header[:i] + string([]byte{b}) + header[i+1:]
			if payment.Verify(fuzzSecret, body, h, now, 0) == nil {
				t.Fatalf("accepted header %q, Sign made %q", h, header)
			}
		}
	})
}
