package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/auth"
)

// opsUser is the ops account the generator makes its coupon and campaign as.
const opsUser = 900

// Endpoints of the setup (not measured).
const (
	epCampaigns   = "POST /api/v1/ops/campaigns"
	epCampaignEnd = "POST /api/v1/ops/campaigns/{campaignId}/end"
	epCoupons     = "POST /api/v1/ops/coupons"
)

// Coupon of a run: CouponPercent off, at most CouponCap TRY, redemptions enough for every order
// of any run, and a per-shopper limit above the one order each shopper places (a repeated key is
// the same order).
const (
	CouponPercent     = "10"
	CouponCap         = "50.00"
	couponPerShopper  = 10
	couponRedemptions = MaxOrders
)

// promotions are what the run made through the ops API.
type promotions struct {
	coupon     string // the coupon's code; empty without one
	campaignID int64  // the campaign on the hot SKUs; 0 without one
}

// setupPromotions makes the run's coupon (when CouponShare > 0) and starts the campaign on the hot
// SKUs (when CampaignHot > 0), as ops do.
func (g *gen) setupPromotions(ctx context.Context) error {
	until := time.Now().Add(g.cfg.Duration + g.cfg.HoldTTL + g.cfg.Settle + time.Hour).UTC().Format(time.RFC3339)
	if g.cfg.CouponShare > 0 {
		code := couponCode(g.cfg.RunID)
		var out struct{}
		if err := g.opsCall(ctx, epCoupons, "/api/v1/ops/coupons", map[string]any{"code": code, "kind": "PERCENT",
			"value": CouponPercent, "maxDiscount": CouponCap, "currency": "TRY", "endsAt": until,
			"maxRedemptions": couponRedemptions, "maxPerShopper": couponPerShopper}, http.StatusCreated, &out); err != nil {
			return err
		}
		g.promo.coupon = code
	}
	if g.cfg.CampaignHot > 0 && len(g.cat.hot) > 0 {
		ids := make([]int64, len(g.cat.hot))
		for i, s := range g.cat.hot {
			ids[i] = s.id
		}
		var out struct {
			ID int64 `json:"id"`
		}
		if err := g.opsCall(ctx, epCampaigns, "/api/v1/ops/campaigns", map[string]any{"name": "Load run " + g.cfg.RunID + " hot SKUs",
			"skuIds": ids, "kind": "PERCENT", "value": strconv.FormatFloat(g.cfg.CampaignHot, 'f', 2, 64),
			"endsAt": until}, http.StatusCreated, &out); err != nil {
			return err
		}
		g.promo.campaignID = out.ID
	}
	return nil
}

// endCampaign ends the campaign on the hot SKUs once no shopper is left ordering, so that the next
// run's prices are its own.
func (g *gen) endCampaign(ctx context.Context) error {
	if g.promo.campaignID == 0 {
		return nil
	}
	var out struct{}
	return g.opsCall(ctx, epCampaignEnd, fmt.Sprintf("/api/v1/ops/campaigns/%d/end", g.promo.campaignID), nil, http.StatusOK, &out)
}

func (g *gen) opsCall(ctx context.Context, endpoint, path string, body any, want int, out any) error {
	tok := g.cfg.OpsToken
	if tok == "" {
		var err error
		if tok, err = auth.Mint([]byte(g.cfg.JWTSecret), auth.Principal{UserID: opsUser, Role: auth.RoleOps}, time.Hour); err != nil {
			return err
		}
	}
	a, err := g.setup.send(ctx, request{endpoint: endpoint, method: http.MethodPost, url: path, token: tok, json: body})
	if err != nil {
		return err
	}
	if a.status != want {
		return fmt.Errorf("%s: %d %s %s", endpoint, a.status, a.code, truncate(string(a.body), 300))
	}
	return a.decode(out)
}

// couponCode is the run's coupon code: LG- and the run id, in the letters a code may hold.
func couponCode(runID string) string {
	var b strings.Builder
	b.WriteString("LG-")
	for _, r := range strings.ToUpper(runID) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' || r == '_' {
			b.WriteRune(r)
		}
		if b.Len() == 32 {
			break
		}
	}
	return b.String()
}

// isCouponRefusal: an order refused for its coupon (409 COUPON_…), a realistic outcome when many
// shoppers share one, never a fault of the product.
func isCouponRefusal(code string) bool { return strings.HasPrefix(code, "COUPON_") }
