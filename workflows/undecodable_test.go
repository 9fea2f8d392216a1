package workflows_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/workflows"
)

// sealingCodec stands for the product's codec on a worker that takes only what a trusted client
// encoded: it seals what it encodes (a mark in the metadata) and refuses to decode a payload
// without the mark, as the codec refuses one written in clear.
type sealingCodec struct{}

func (sealingCodec) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		p = proto.Clone(p).(*commonpb.Payload)
		p.Metadata["sealed"] = []byte("yes")
		out[i] = p
	}
	return out, nil
}

func (sealingCodec) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		if string(p.Metadata["sealed"]) != "yes" {
			return nil, errors.New("payload not encrypted by a trusted client: refused")
		}
		p = proto.Clone(p).(*commonpb.Payload)
		delete(p.Metadata, "sealed")
		out[i] = p
	}
	return out, nil
}

// inClear is a value sent as a client that does not encode would send it: written in clear.
type inClear struct{ v any }

// clearOrSealed is the test environment's data converter: everything sealed, but an inClear value.
type clearOrSealed struct{ converter.DataConverter }

func (d clearOrSealed) ToPayloads(values ...any) (*commonpb.Payloads, error) {
	if len(values) == 1 {
		if c, ok := values[0].(inClear); ok {
			return converter.GetDefaultDataConverter().ToPayloads(c.v)
		}
	}
	return d.DataConverter.ToPayloads(values...)
}

func strictConverter() converter.DataConverter {
	return clearOrSealed{converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), sealingCodec{})}
}

// TestOrder_SignalsThatDoNotDecode_NotedAndIgnored: signals written in clear where the worker takes
// only encrypted payloads (a support cancel, a payment's approval) do not decode: the order notes
// each and acts on none, and goes on as if they had not come — here, its hold expires.
func TestOrder_SignalsThatDoNotDecode_NotedAndIgnored(t *testing.T) {
	s := newSaga(t)
	s.env.SetDataConverter(strictConverter())
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(time.Minute, workflows.SupportAction, inClear{workflows.SupportRequest{Action: workflows.ActionCancel,
		Reason: "typed in clear"}})
	s.signal(2*time.Minute, workflows.SignalPaymentResult, inClear{workflows.PaymentSignal{EventID: "evt_clear",
		IntentID: "pi_1", Status: "AUTHORIZED"}})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status, "neither obeyed")
	assert.Equal(t, problem.HoldExpired, st.FailureCode)
	assert.Zero(t, s.calls["VerifyEvent"]+s.calls["Confirm"], "the approval in clear was not acted on")
	var ignored []string
	for _, e := range st.Timeline {
		if e.Event == "signal ignored" {
			ignored = append(ignored, e.Detail)
		}
	}
	if assert.Len(t, ignored, 2, "each noted") {
		assert.True(t, strings.HasPrefix(ignored[0], workflows.SupportAction), ignored[0])
		assert.True(t, strings.HasPrefix(ignored[1], workflows.SignalPaymentResult), ignored[1])
	}
}

// TestHold_ExtendSignalThatDoesNotDecode_Ignored: an extension of the hold written in clear does
// not decode; the hold ignores it and still ends at its expiry (it waited on the signal before).
func TestHold_ExtendSignalThatDoesNotDecode_Ignored(t *testing.T) {
	h := newHold(t)
	h.env.SetDataConverter(strictConverter())
	h.on("ReleaseExpired").Return(inventory.Expiry{Released: 2}, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(workflows.SignalHoldExtend, inClear{workflows.HoldExtend{ExpiresAt: h.env.Now().Add(time.Hour)}})
	}, time.Minute)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 2}, res)
}
