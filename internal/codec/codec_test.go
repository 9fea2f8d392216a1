package codec_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/marketplace/checkout/internal/codec"
)

func key(id string, fill byte) codec.Key {
	return codec.Key{ID: id, Secret: bytes.Repeat([]byte{fill}, codec.KeySize)}
}

func mustCodec(t *testing.T, primary codec.Key, older ...codec.Key) *codec.Codec {
	t.Helper()
	c, err := codec.New(primary, older...)
	require.NoError(t, err)
	return c
}

// order is what an order's input holds that must not be readable in Temporal.
type order struct {
	AddressID          int64  `json:"addressId"`
	PaymentMethodToken string `json:"paymentMethodToken"`
}

func encode(t *testing.T, c *codec.Codec, v any) *commonpb.Payload {
	t.Helper()
	p, err := c.DataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

func TestCodec_RoundTrip_NothingInClear(t *testing.T) {
	t.Parallel()
	c := mustCodec(t, key("k1", 1))
	in := order{AddressID: 41, PaymentMethodToken: "tok_secret_3ds"}
	p := encode(t, c, in)

	assert.Equal(t, codec.EncodingEncrypted, string(p.Metadata[converter.MetadataEncoding]))
	assert.Equal(t, "k1", string(p.Metadata[codec.MetadataKeyID]))
	raw, err := p.Marshal()
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "tok_secret_3ds")
	assert.NotContains(t, string(raw), "addressId")
	assert.NotContains(t, string(raw), "json/plain", "the inner encoding is sealed too")

	var out order
	require.NoError(t, c.DataConverter().FromPayload(p, &out))
	assert.Equal(t, in, out)
	assert.NotEqual(t, p.Data, encode(t, c, in).Data, "a fresh nonce every time")
}

func TestCodec_Rotation_OldKeyStillDecryptsAfterANewPrimary(t *testing.T) {
	t.Parallel()
	old := mustCodec(t, key("k1", 1))
	p := encode(t, old, order{AddressID: 7, PaymentMethodToken: "tok_ok"})

	rotated := mustCodec(t, key("k2", 2), key("k1", 1))
	var out order
	require.NoError(t, rotated.DataConverter().FromPayload(p, &out))
	assert.Equal(t, "tok_ok", out.PaymentMethodToken)
	assert.Equal(t, "k2", string(encode(t, rotated, out).Metadata[codec.MetadataKeyID]), "new payloads take the new primary")
	assert.Equal(t, "k2", rotated.PrimaryKeyID())
}

// TestCodec_DecodeOnly_WritesInClearReadsBoth: while workers of a release without the codec still
// run, the new processes write what those workers must read in clear, and read both what they
// wrote and what a fully encrypting process wrote.
func TestCodec_DecodeOnly_WritesInClearReadsBoth(t *testing.T) {
	t.Parallel()
	full := mustCodec(t, key("k1", 1))
	only := full.DecodeOnly()
	in := order{AddressID: 9, PaymentMethodToken: "tok_ok"}

	clear := encode(t, only, in)
	assert.Equal(t, "json/plain", string(clear.Metadata[converter.MetadataEncoding]), "readable by a worker without the codec")
	var out order
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(clear, &out))
	assert.Equal(t, in, out)

	out = order{}
	require.NoError(t, only.DataConverter().FromPayload(encode(t, full, in), &out))
	assert.Equal(t, in, out, "an encrypted payload still opens")
	assert.Equal(t, codec.EncodingEncrypted, string(encode(t, full, in).Metadata[converter.MetadataEncoding]),
		"the codec it came from still encrypts")
}

func TestCodec_TamperedCiphertext_Refused(t *testing.T) {
	t.Parallel()
	c := mustCodec(t, key("k1", 1), key("k0", 9))
	for name, tamper := range map[string]func(*commonpb.Payload){
		"flipped byte": func(p *commonpb.Payload) { p.Data[len(p.Data)-5] ^= 0x01 },
		"truncated":    func(p *commonpb.Payload) { p.Data = p.Data[:10] },
		"relabelled":   func(p *commonpb.Payload) { p.Metadata[codec.MetadataKeyID] = []byte("k0") },
	} {
		p := encode(t, c, order{AddressID: 1})
		tamper(p)
		_, err := c.Decode([]*commonpb.Payload{p})
		require.ErrorIs(t, err, codec.ErrUndecryptable, name)
	}
}

func TestCodec_UnknownKeyID_RefusedWithTheKeyNamed(t *testing.T) {
	t.Parallel()
	p := encode(t, mustCodec(t, key("retired-2025", 1)), order{AddressID: 1})
	_, err := mustCodec(t, key("k2", 2), key("k1", 3)).Decode([]*commonpb.Payload{p})
	require.ErrorIs(t, err, codec.ErrUnknownKey)
	assert.Contains(t, err.Error(), `"retired-2025"`)
	assert.Contains(t, err.Error(), "k1, k2", "the keys this process has")
}

func TestCodec_PlainPayload_PassesThroughUnchanged(t *testing.T) {
	t.Parallel()
	c := mustCodec(t, key("k1", 1))
	plain, err := converter.GetDefaultDataConverter().ToPayload(order{AddressID: 3, PaymentMethodToken: "tok_ok"})
	require.NoError(t, err)
	out, err := c.Decode([]*commonpb.Payload{plain, nil})
	require.NoError(t, err)
	assert.Same(t, plain, out[0])
	assert.Nil(t, out[1])

	var o order
	require.NoError(t, c.DataConverter().FromPayload(plain, &o), "a history recorded before encryption still decodes")
	assert.Equal(t, int64(3), o.AddressID)

	sealed := encode(t, c, o)
	again, err := c.Encode([]*commonpb.Payload{sealed})
	require.NoError(t, err)
	assert.Same(t, sealed, again[0], "encoding an encrypted payload changes nothing")
}

// TestCodec_Strict_RefusesPlaintextDecodesWhatTheKeySealed: a strict codec decodes what a holder of
// the key encrypted and null values, and refuses a payload in clear, such as a signal sent with the
// bare CLI; its lenient view shows that payload as it is.
func TestCodec_Strict_RefusesPlaintextDecodesWhatTheKeySealed(t *testing.T) {
	t.Parallel()
	c := mustCodec(t, key("k1", 1))
	strict := c.Strict()
	plain, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"action": "refund"})
	require.NoError(t, err)
	_, err = strict.Decode([]*commonpb.Payload{encode(t, c, order{AddressID: 1}), plain})
	require.ErrorIs(t, err, codec.ErrPlaintext)
	var v map[string]string
	require.ErrorIs(t, strict.DataConverter().FromPayload(plain, &v), codec.ErrPlaintext, "the worker's converter refuses it")

	var o order
	require.NoError(t, strict.DataConverter().FromPayload(encode(t, c, order{AddressID: 4}), &o))
	assert.Equal(t, int64(4), o.AddressID)
	out, err := strict.Decode([]*commonpb.Payload{nil})
	require.NoError(t, err)
	assert.Nil(t, out[0])

	shown, err := strict.Lenient().Decode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	assert.Same(t, plain, shown[0])
}

func TestNew_RefusesBadKeys(t *testing.T) {
	t.Parallel()
	for name, keys := range map[string][]codec.Key{
		"short key":     {{ID: "k1", Secret: []byte("sixteen-byte-key")}},
		"no id":         {key("", 1)},
		"id with comma": {key("a,b", 1)},
		"duplicate id":  {key("k1", 1), key("k1", 2)},
	} {
		_, err := codec.New(keys[0], keys[1:]...)
		assert.Error(t, err, name)
	}
}

func TestDecodeMessage_DecodesAHistoryInPlace(t *testing.T) {
	t.Parallel()
	c := mustCodec(t, key("k1", 1))
	input := encode(t, c, order{PaymentMethodToken: "tok_3ds"})
	h := &historypb.History{Events: []*historypb.HistoryEvent{{
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
			WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
				Input: &commonpb.Payloads{Payloads: []*commonpb.Payload{input}},
			},
		},
	}}}
	enc, err := codec.Encrypted(context.Background(), h)
	require.NoError(t, err)
	assert.True(t, enc)

	require.NoError(t, c.DecodeMessage(context.Background(), h))
	enc, err = codec.Encrypted(context.Background(), h)
	require.NoError(t, err)
	assert.False(t, enc)
	got := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0]
	assert.Equal(t, "json/plain", string(got.Metadata[converter.MetadataEncoding]))
	assert.Contains(t, string(got.Data), "tok_3ds")
}
