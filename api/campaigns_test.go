package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
)

// TestCampaign_SellerPriorityBelowThePlatforms: a seller's campaign takes a priority from 0 to
// MaxSellerCampaignPriority, never one of the platform's above it; ops may use any. A campaign ops
// start at the platform's priority comes first on a line, before a seller's highest.
func TestCampaign_SellerPriorityBelowThePlatforms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	seller, ops := h.seller(42), h.token(auth.Principal{UserID: 900, Role: auth.RoleOps})
	campaignOn := func(sku int64, priority int, value string) string {
		return fmt.Sprintf(`{"name":"c%d","skuIds":[%d],"kind":"PERCENT","value":%q,"priority":%d,"endsAt":"2099-01-01T00:00:00Z"}`,
			priority, sku, value, priority)
	}
	campaign := func(priority int, value string) string { return campaignOn(71, priority, value) }
	for _, p := range []int{api.MaxSellerCampaignPriority + 1, 1_000_000, -1} {
		r := h.do(http.MethodPost, "/seller-api/v1/campaigns", seller, campaign(p, "50"))
		require.Equal(t, http.StatusBadRequest, r.status, "priority %d: %s", p, r.raw)
		assert.EqualValues(t, problem.ValidationFailed, r.body["code"])
		assert.Contains(t, r.raw, `"field":"priority"`)
	}
	mine := h.do(http.MethodPost, "/seller-api/v1/campaigns", seller, campaign(api.MaxSellerCampaignPriority, "50"))
	require.Equal(t, http.StatusCreated, mine.status, mine.raw)
	platform := h.do(http.MethodPost, "/api/v1/ops/campaigns", ops, campaign(api.PlatformCampaignPriority, "10"))
	require.Equal(t, http.StatusCreated, platform.status, platform.raw)
	assert.Equal(t, http.StatusCreated, h.do(http.MethodPost, "/api/v1/ops/campaigns", ops, campaignOn(72, 1_000_000, "1")).status,
		"ops choose any priority")

	shopper := h.shopper(7)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	p := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, p.status, p.raw)
	assert.Equal(t, []any{platform.body["id"]}, lines(t, p.body)[71]["campaigns"],
		"the platform's 10 %% comes first, and the seller's 50 %% does not stack on it: %s", p.raw)
}

// TestCampaign_EndedBeforeItStarts_NeverApplies: a campaign scheduled for later and ended now
// never prices a line, now or when its start comes.
func TestCampaign_EndedBeforeItStarts_NeverApplies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	seller := h.seller(42)
	later := h.do(http.MethodPost, "/seller-api/v1/campaigns", seller,
		`{"name":"later","skuIds":[71],"kind":"PERCENT","value":"50","startsAt":"2099-01-01T00:00:00Z","endsAt":"2099-02-01T00:00:00Z"}`)
	require.Equal(t, http.StatusCreated, later.status, later.raw)
	ended := h.do(http.MethodPost, fmt.Sprintf("/seller-api/v1/campaigns/%d/end", int64(later.body["id"].(float64))), seller, "")
	require.Equal(t, http.StatusOK, ended.status, ended.raw)
	ends, err := time.Parse(time.RFC3339Nano, ended.body["endsAt"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), ends, time.Minute, "it ends now, not in 2099: %s", ended.raw)

	shopper := h.shopper(7)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	p := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, p.status, p.raw)
	assert.Equal(t, "1249.90", lines(t, p.body)[71]["unitPrice"], "the list price: %s", p.raw)
	assert.Nil(t, lines(t, p.body)[71]["campaigns"])
	list := h.do(http.MethodGet, "/seller-api/v1/campaigns", seller, "")
	assert.NotContains(t, list.raw, `"name":"later"`, "no longer listed as running or to come")
}
