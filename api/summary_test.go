package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/api"
)

// startRecorder is a Temporal client that records the options of the order workflows the API
// would start, and answers no update.
type startRecorder struct {
	api.TemporalClient
	mu      sync.Mutex
	started []client.StartWorkflowOptions
}

func (r *startRecorder) NewWithStartWorkflowOperation(o client.StartWorkflowOptions, _ any, _ ...any) client.WithStartWorkflowOperation {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, o)
	return nil
}

func (r *startRecorder) UpdateWithStartWorkflow(context.Context, client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return nil, errors.New("not answering")
}

// TestOrder_SummaryHoldsNoIdempotencyKey: the summary support reads in the Temporal UI (rendered as
// Markdown) is the product's own text; the shopper's Idempotency-Key, which may hold links or
// markup, stays out of it (the workflow id names the key, as plain text).
func TestOrder_SummaryHoldsNoIdempotencyKey(t *testing.T) {
	t.Parallel()
	rec := &startRecorder{}
	h := newHarness(t, rec)
	shopper := h.shopper(7)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	pv := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "").body["priceVersion"].(string)
	addr := (h.scalar(`SELECT id FROM addresses WHERE user_id = 7 ORDER BY id LIMIT 1`))
	const key = "[support-click-here](https://evil.example/)![x](https://evil.example/x.png)<b>"
	r := h.send(http.MethodPost, "/api/v1/orders", shopper,
		fmt.Sprintf(`{"priceVersion":%q,"addressId":%d,"paymentMethodToken":"tok_ok"}`, pv, addr), "Idempotency-Key", key)
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.raw)
	require.NotEmpty(t, rec.started)
	for _, o := range rec.started {
		assert.NotContains(t, o.StaticSummary, "evil.example")
		assert.NotContains(t, o.StaticSummary, "[")
		assert.NotContains(t, o.StaticSummary, "<")
		assert.Equal(t, "Order of customer 7", o.StaticSummary)
	}
}
