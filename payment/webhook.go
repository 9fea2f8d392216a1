package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook event types. The provider sends them when an intent leaves REQUIRES_ACTION, because
// only then does the merchant learn the outcome outside its own call.
const (
	EventAuthorized = "payment_intent.authorized"
	EventDeclined   = "payment_intent.declined"
)

// WebhookEvent is the JSON body of a webhook. Delivery is at least once: the receiver dedupes
// by ID.
type WebhookEvent struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Created time.Time `json:"created"`
	Intent  Intent    `json:"intent"`
}

// SignatureHeader carries the webhook signature.
const SignatureHeader = "Paysim-Signature"

// DefaultTolerance is how far a signature's timestamp may be from the receiver's clock; it bounds
// how long a captured request can be replayed.
const DefaultTolerance = 5 * time.Minute

// ErrInvalidSignature refuses a webhook whose signature header is missing, malformed, wrong or
// stale. The wrapped message says which; do not show it to the sender.
var ErrInvalidSignature = errors.New("invalid webhook signature")

// Sign returns the SignatureHeader value for body sent at now: "t=<unix>,v1=<hex HMAC-SHA256 of
// "<unix>.<body>">". The timestamp is inside the MAC so that it cannot be moved to replay later.
func Sign(secret, body []byte, now time.Time) string {
	ts := now.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// Verify checks header against body: the MAC must match (compared in constant time, so the
// answer time leaks nothing), and its timestamp must be within tolerance of now in either
// direction (tolerance <= 0 means DefaultTolerance). Several v1 values are accepted, any one
// matching, so that a secret can be rotated. Both values must be spelled as Sign spells them
// (decimal seconds without sign or leading zeros, lowercase hex), so that a signed request has
// one header only: a header changed in any byte is refused.
func Verify(secret, body []byte, header string, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret configured", ErrInvalidSignature)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	header = strings.TrimSpace(header)
	if header == "" {
		return fmt.Errorf("%w: missing %s header", ErrInvalidSignature, SignatureHeader)
	}
	var (
		ts     int64
		haveTS bool
		sigs   [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: malformed header", ErrInvalidSignature)
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || haveTS || strconv.FormatInt(n, 10) != v {
				return fmt.Errorf("%w: malformed timestamp", ErrInvalidSignature)
			}
			ts, haveTS = n, true
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size || hex.EncodeToString(sig) != v {
				return fmt.Errorf("%w: malformed v1 signature", ErrInvalidSignature)
			}
			sigs = append(sigs, sig)
		}
	}
	if !haveTS || len(sigs) == 0 {
		return fmt.Errorf("%w: malformed header", ErrInvalidSignature)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside the %s tolerance", ErrInvalidSignature, tolerance)
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: signature does not match", ErrInvalidSignature)
}

func mac(secret []byte, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(strconv.AppendInt(nil, ts, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// SignedWebhooks reads the simulator's webhooks: signed as Stripe signs its own (Sign), in the
// SignatureHeader, the event a WebhookEvent in JSON.
type SignedWebhooks struct {
	Secret []byte
	// Tolerance bounds the signature's age either way; zero: DefaultTolerance.
	Tolerance time.Duration
}

// VerifyWebhook checks the signature (ErrInvalidSignature) and reads the event.
func (w SignedWebhooks) VerifyWebhook(body []byte, header http.Header, now time.Time) (WebhookEvent, error) {
	if err := Verify(w.Secret, body, header.Get(SignatureHeader), now, w.Tolerance); err != nil {
		return WebhookEvent{}, err
	}
	var ev WebhookEvent
	err := json.Unmarshal(body, &ev)
	return ev, err
}
