package pricing

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing/internal/pricingstore"
)

// CouponRefusal says why a coupon does not apply to a basket: one of the problem.Coupon* codes.
// The preview says it, and an order with the coupon is refused with it (Problem).
type CouponRefusal struct {
	Code    problem.Code `json:"code"`
	Message string       `json:"message"`
	// MinBasketMinor is the basket the coupon needs (with COUPON_MIN_BASKET).
	MinBasketMinor int64 `json:"minBasketMinor,omitempty"`
}

func (r *CouponRefusal) Error() string { return string(r.Code) + ": " + r.Message }

// Problem is the refusal as the coded error that refuses an order with the coupon.
func (r *CouponRefusal) Problem() *problem.Error {
	p := problem.New(r.Code, r.Message)
	if r.MinBasketMinor > 0 {
		p = p.WithDetails(CouponDetails{MinBasketMinor: r.MinBasketMinor})
	}
	return p
}

// CouponDetails are the details of a coupon's refusal that has any (COUPON_MIN_BASKET).
type CouponDetails struct {
	MinBasketMinor int64 `json:"minBasketMinor"`
}

// PriceChangedDetails are the details of a PRICE_CHANGED refusal: the version the shopper must see
// now.
type PriceChangedDetails struct {
	PriceVersion string `json:"priceVersion"`
}

// AppliedCoupon is the coupon a quote applies and what it takes off the total.
type AppliedCoupon struct {
	ID            int64  `json:"id"`
	Code          string `json:"code"`
	DiscountMinor int64  `json:"discountMinor"`
}

// NormalCode is a coupon code as stored: trimmed, in capitals.
func NormalCode(code string) string { return strings.ToUpper(strings.TrimSpace(code)) }

// unavailable says why the coupon cannot be redeemed by this shopper now, whatever the basket:
// outside its window, used up, or used by the shopper as often as it allows (nil: it can).
func unavailable(c pricingstore.CouponByCodeRow) *CouponRefusal {
	switch {
	case c.Now.Before(c.StartsAt):
		return &CouponRefusal{Code: problem.CouponNotStarted, Message: "the coupon is not valid yet"}
	case !c.Now.Before(c.EndsAt):
		return &CouponRefusal{Code: problem.CouponExpired, Message: "the coupon has expired"}
	case c.Redeemed >= c.MaxRedemptions:
		return &CouponRefusal{Code: problem.CouponUsedUp, Message: "the coupon has been used up"}
	case c.ShopperRedeemed >= c.MaxPerShopper:
		return &CouponRefusal{Code: problem.CouponAlreadyUsed, Message: "you have used this coupon as many times as it allows"}
	}
	return nil
}

// WithCoupon applies the coupon to the quote for the shopper: its discount comes off the total and
// the priceVersion names it. When it does not apply, the quote comes back unchanged with the
// reason. Whether a redemption is still free is decided for good when the order is written
// (RedeemCoupon); this answer is what the shopper sees before.
func WithCoupon(ctx context.Context, conn db.DBTX, quote Quote, code string, userID int64) (Quote, *CouponRefusal, error) {
	c, err := pricingstore.New(conn).CouponByCode(ctx, userID, NormalCode(code))
	if db.NotFound(err) {
		return quote, &CouponRefusal{Code: problem.CouponNotFound, Message: "there is no coupon with this code"}, nil
	}
	if err != nil {
		return quote, nil, err
	}
	if refusal := unavailable(c); refusal != nil {
		return quote, refusal, nil
	}
	var eligible int64
	for _, it := range quote.Items {
		if it.Currency == c.Currency && (c.SkuIds == nil || slices.Contains(c.SkuIds, it.SKUID)) &&
			(c.SellerID == nil || *c.SellerID == it.SellerID) {
			eligible += it.LineTotalMinor
		}
	}
	if eligible == 0 {
		return quote, &CouponRefusal{Code: problem.CouponNotApplicable, Message: "the coupon applies to none of these items"}, nil
	}
	if eligible < c.MinBasketMinor {
		return quote, &CouponRefusal{Code: problem.CouponMinBasket, MinBasketMinor: c.MinBasketMinor, Message: fmt.Sprintf(
			"the coupon needs a basket of %s %s of the items it covers", money.FormatIn(c.MinBasketMinor, c.Currency), c.Currency)}, nil
	}
	off := min(c.Value, eligible)
	if c.Kind == CampaignPercent {
		off = eligible * c.Value / 10000
		if c.MaxDiscountMinor != nil {
			off = min(off, *c.MaxDiscountMinor)
		}
	}
	if off <= 0 {
		return quote, &CouponRefusal{Code: problem.CouponNotApplicable, Message: "the coupon takes nothing off these items"}, nil
	}
	quote.Coupon = &AppliedCoupon{ID: c.ID, Code: c.Code, DiscountMinor: off}
	quote.TotalMinor -= off
	quote.PriceVersion = VersionOf(quote.Items, quote.Coupon)
	return quote, nil, nil
}
