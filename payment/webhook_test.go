package payment_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/marketplace/checkout/payment"
)

func TestSignatureOfTheSameBodyVerifies(t *testing.T) {
	secret := []byte("whsec-test-secret-0123456789")
	body := []byte(`{"id":"evt_1","type":"payment_intent.authorized"}`)
	now := time.Unix(1_764_000_000, 0)
	header := payment.Sign(secret, body, now)

	assert.Regexp(t, `^t=1764000000,v1=[0-9a-f]{64}$`, header)
	assert.NoError(t, payment.Verify(secret, body, header, now.Add(30*time.Second), 0))
	// Several v1 values (a secret being rotated): any one matching is enough.
	rotated := header + ",v1=" + strings.Repeat("ab", 32)
	assert.NoError(t, payment.Verify(secret, body, rotated, now, 0))
}

func TestSignatureRejects(t *testing.T) {
	secret := []byte("whsec-test-secret-0123456789")
	body := []byte(`{"id":"evt_1","type":"payment_intent.authorized"}`)
	now := time.Unix(1_764_000_000, 0)
	good := payment.Sign(secret, body, now)

	tests := []struct {
		name      string
		secret    []byte
		body      []byte
		header    string
		at        time.Time
		tolerance time.Duration
	}{
		{name: "tampered body", body: []byte(`{"id":"evt_1","type":"payment_intent.declined"}`)},
		{name: "wrong secret", secret: []byte("another-secret-0123456789")},
		{name: "no secret configured", secret: []byte{}},
		{name: "missing header", header: " "},
		{name: "header without timestamp", header: good[strings.Index(good, "v1="):]},
		{name: "header without signature", header: good[:strings.Index(good, ",")]},
		{name: "header not key=value", header: "garbage"},
		{name: "timestamp not a number", header: strings.Replace(good, "t=1764000000", "t=soon", 1)},
		{name: "signature not hex", header: good[:strings.Index(good, "v1=")] + "v1=zz"},
		{name: "signature truncated", header: good[:len(good)-2]},
		{name: "two timestamps", header: "t=1764000000," + good},
		{name: "signature in capitals", header: good[:strings.Index(good, "v1=")+3] + strings.ToUpper(good[strings.Index(good, "v1=")+3:])},
		{name: "timestamp with a leading zero", header: strings.Replace(good, "t=1764000000", "t=01764000000", 1)},
		{name: "timestamp with a plus sign", header: strings.Replace(good, "t=1764000000", "t=+1764000000", 1)},
		{name: "stale timestamp", at: now.Add(5*time.Minute + time.Second)},
		{name: "timestamp from the future", at: now.Add(-5*time.Minute - time.Second)},
		{name: "stale under a custom tolerance", at: now.Add(11 * time.Second), tolerance: 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, b, h, at := secret, body, good, now
			if tc.secret != nil {
				s = tc.secret
			}
			if tc.body != nil {
				b = tc.body
			}
			if tc.header != "" {
				h = tc.header
			}
			if !tc.at.IsZero() {
				at = tc.at
			}
			err := payment.Verify(s, b, h, at, tc.tolerance)
			require.Error(t, err)
			assert.ErrorIs(t, err, payment.ErrInvalidSignature)
		})
	}
}

// TestSign_IsStripesScheme_VerifiedByStripeGo: the simulator signs its webhooks as Stripe does, so
// that stripe-go's own check accepts them, within its tolerance and not beyond.
func TestSign_IsStripesScheme_VerifiedByStripeGo(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"payment_intent.authorized"}`)
	secret := "whsec_simulator_secret_0123456789"
	require.NoError(t, webhook.ValidatePayloadWithTolerance(body, payment.Sign([]byte(secret), body, time.Now()), secret,
		time.Minute))
	old := payment.Sign([]byte(secret), body, time.Now().Add(-2*time.Minute))
	assert.ErrorIs(t, webhook.ValidatePayloadWithTolerance(body, old, secret, time.Minute), webhook.ErrTooOld)
	assert.ErrorIs(t, webhook.ValidatePayloadWithTolerance(body, payment.Sign([]byte("other"), body, time.Now()), secret,
		time.Minute), webhook.ErrNoValidSignature)
}
