package webhooks

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Standard Webhooks' headers (standardwebhooks.org): the message id (the event's id: the same on
// every attempt and replay, so a receiver drops what it has already handled), the time of the
// attempt (a receiver refuses old ones) and the signatures.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// NewSecret is a new signing secret: 32 random bytes.
func NewSecret() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// FormatSecret is the secret as the seller is given it, once: whsec_ and its base64.
func FormatSecret(secret []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(secret) }

// Sign is the webhook-signature header of a message: one v1 signature (HMAC-SHA256 of
// "<id>.<timestamp>.<body>") per secret that signs now, space-separated, newest first, so that a
// receiver with either the new secret or the one being rotated out accepts it.
func Sign(secrets [][]byte, id string, at time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhookRaw(s)
		if err != nil {
			return "", err
		}
		sig, err := wh.Sign(id, at, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}
