// Package codec encrypts what the product writes to Temporal: every payload (workflow and activity
// inputs and results, signals, updates, queries, memos, summaries and details) is sealed with
// AES-256-GCM before it leaves the process, so the Temporal server, its database and its UI hold
// no personal data in clear. Each encrypted payload names its key, so keys can be rotated:
// payloads are encrypted with the primary key and decrypted with whichever key they name.
// Payloads that are not encrypted pass through, so histories written before encryption was on
// still decode, unless the codec is strict (Strict): then a payload that no holder of the key
// encrypted is refused, so that an input written by a client without the key (a signal sent with
// the bare CLI, a workflow started past the codec) fails instead of being obeyed.
package codec

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload: its encoding, and the id of the key that sealed it.
const (
	EncodingEncrypted = "binary/encrypted"
	MetadataKeyID     = "encryption-key-id"
)

// KeySize is the length of a key: AES-256.
const KeySize = 32

// maxKeyIDLength bounds a key id, which every encrypted payload carries.
const maxKeyIDLength = 64

// Errors of Decode, for callers that tell a missing key from altered data.
var (
	// ErrUnknownKey: the payload names a key this codec does not have.
	ErrUnknownKey = errors.New("unknown encryption key id")
	// ErrUndecryptable: the payload does not open with the key it names (altered, truncated, or
	// a different key under the same id).
	ErrUndecryptable = errors.New("payload does not decrypt")
	// ErrPlaintext: a strict codec was given a payload that is not encrypted.
	ErrPlaintext = errors.New("payload not encrypted by the checkout's codec")
)

// Key is one AES-256 key and the id payloads name it by.
type Key struct {
	ID     string
	Secret []byte
}

// Codec is the product's payload codec. It is safe for concurrent use.
type Codec struct {
	primary string
	aeads   map[string]cipher.AEAD
	// decodeOnly: Encode leaves payloads in clear (see DecodeOnly).
	decodeOnly bool
	// strict: Decode refuses payloads that are not encrypted (see Strict).
	strict bool
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New returns a codec that encrypts with primary and decrypts with primary and every older key.
func New(primary Key, older ...Key) (*Codec, error) {
	c := &Codec{primary: primary.ID, aeads: map[string]cipher.AEAD{}}
	for _, k := range append([]Key{primary}, older...) {
		if err := ValidKeyID(k.ID); err != nil {
			return nil, err
		}
		if _, dup := c.aeads[k.ID]; dup {
			return nil, fmt.Errorf("key id %q is given twice", k.ID)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("key %q is %d bytes: AES-256 takes %d", k.ID, len(k.Secret), KeySize)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, err
		}
		if c.aeads[k.ID], err = cipher.NewGCM(block); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ValidKeyID: 1 to 64 letters, digits, '.', '_' or '-' (it goes into payload metadata and into
// the kid=key lists of the settings).
func ValidKeyID(id string) error {
	if id == "" || len(id) > maxKeyIDLength {
		return fmt.Errorf("key id %q: 1 to %d characters", id, maxKeyIDLength)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("key id %q: letters, digits, '.', '_' and '-' only", id)
		}
	}
	return nil
}

// DecodeOnly returns the codec that writes payloads in clear and still opens encrypted ones: how
// the codec is introduced while workers without it still run (they could not read an encrypted
// signal, update or input), before encryption is switched on.
func (c *Codec) DecodeOnly() *Codec {
	d := *c
	d.decodeOnly = true
	return &d
}

// Strict returns the codec that refuses to decode a payload that is not encrypted (ErrPlaintext):
// what api and worker run on outside `checkout-dev dev`, so that nothing reaches the saga that a
// holder of the key did not write. Null payloads (no value at all) still pass.
func (c *Codec) Strict() *Codec {
	d := *c
	d.strict = true
	return &d
}

// Lenient returns the codec that passes payloads in clear through: for showing a history to
// support as it is, plaintext included, never for acting on it.
func (c *Codec) Lenient() *Codec {
	d := *c
	d.strict = false
	return &d
}

// PrimaryKeyID is the id of the key new payloads are encrypted with.
func (c *Codec) PrimaryKeyID() string { return c.primary }

// Encode seals each payload, metadata and data, with the primary key. A payload that is already
// encrypted is left as it is, so encoding twice changes nothing.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	aead := c.aeads[c.primary]
	for i, p := range payloads {
		if p == nil || encrypted(p) || c.decodeOnly {
			out[i] = p
			continue
		}
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, err
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return payloads, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(EncodingEncrypted),
				MetadataKeyID:              []byte(c.primary),
			},
			Data: aead.Seal(nonce, nonce, plain, additionalData(c.primary)),
		}
	}
	return out, nil
}

// Decode opens each encrypted payload with the key it names; other payloads pass through.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if p == nil {
			continue
		}
		if !encrypted(p) {
			if c.strict {
				return payloads, fmt.Errorf("%w: refused (encoding %q); send it through the codec endpoint or a client with the key",
					ErrPlaintext, p.GetMetadata()[converter.MetadataEncoding])
			}
			out[i] = p
			continue
		}
		kid := string(p.GetMetadata()[MetadataKeyID])
		aead, ok := c.aeads[kid]
		if !ok {
			return payloads, fmt.Errorf("payload encrypted with key %q: %w (this process has %s)", kid, ErrUnknownKey, c.keyIDs())
		}
		data := p.GetData()
		if len(data) < aead.NonceSize()+aead.Overhead() {
			return payloads, fmt.Errorf("payload encrypted with key %q: %w: %d bytes is too short", kid, ErrUndecryptable, len(data))
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], additionalData(kid))
		if err != nil {
			return payloads, fmt.Errorf("payload encrypted with key %q: %w: altered, or another key under that id", kid, ErrUndecryptable)
		}
		var inner commonpb.Payload
		if err := proto.Unmarshal(plain, &inner); err != nil {
			return payloads, fmt.Errorf("payload encrypted with key %q: %w: %v", kid, ErrUndecryptable, err)
		}
		out[i] = &inner
	}
	return out, nil
}

// DataConverter is the SDK's default data converter with this codec over every payload: what
// every Temporal client and worker of the product uses.
func (c *Codec) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// DecodeMessage decodes, in place, every payload of msg (a workflow history, a query answer)
// except search attributes, which are never encoded.
func (c *Codec) DecodeMessage(ctx context.Context, msg proto.Message) error {
	return proxy.VisitPayloads(ctx, msg, proxy.VisitPayloadsOptions{
		SkipSearchAttributes: true,
		Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
			return c.Decode(ps)
		},
	})
}

// Encrypted says whether any payload of msg (search attributes aside) is encrypted by a codec of
// this package: a history that must not be kept as it is, since no key goes with it.
func Encrypted(ctx context.Context, msg proto.Message) (bool, error) {
	found := false
	err := proxy.VisitPayloads(ctx, msg, proxy.VisitPayloadsOptions{
		SkipSearchAttributes: true,
		Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
			for _, p := range ps {
				found = found || encrypted(p)
			}
			return ps, nil
		},
	})
	return found, err
}

func encrypted(p *commonpb.Payload) bool {
	return string(p.GetMetadata()[converter.MetadataEncoding]) == EncodingEncrypted
}

// additionalData binds the ciphertext to the key id it names: a payload relabelled with another
// key's id does not open.
func additionalData(kid string) []byte { return []byte(EncodingEncrypted + "/" + kid) }

func (c *Codec) keyIDs() string {
	return strings.Join(slices.Sorted(maps.Keys(c.aeads)), ", ")
}
