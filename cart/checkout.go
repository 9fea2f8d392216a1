package cart

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

// Checkout is a shopper's member cart priced now, as the checkout preview shows it and the order
// is placed with it: both price it through Price, so they agree on its priceVersion and refuse the
// same things the same way.
type Checkout struct {
	Cart  Snapshot
	Quote pricing.Quote
	// Coupon is why the coupon asked for does not apply (nil: it applies, or none was asked for).
	Coupon *pricing.CouponRefusal
}

// Price prices the member cart of userID from the catalog and the campaigns in force now (never
// from priceAtAdd), then applies the coupon (empty: none). A cart that cannot be priced is refused
// with the coded error of pricing.Compute: CART_EMPTY (also when there is no cart), CART_INVALID
// (SKUs no longer sold, skuIds named) or MIXED_CURRENCY. along, when given, queues the caller's
// own reads of the cart's SKUs on the batch that prices them (PriceOf).
func Price(ctx context.Context, conn db.Batcher, userID int64, coupon string,
	along func(b *pgx.Batch, skuIDs []int64)) (Checkout, error) {
	snap, err := Load(ctx, conn, MemberID(userID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Checkout{}, fmt.Errorf("reading the cart: %w", err)
	}
	return PriceOf(ctx, conn, snap, userID, coupon, along)
}

// PriceOf is Price of the member cart snap, already read. along, when given, queues the caller's
// own reads of the cart's SKUs on the batch that prices them, to go in the same round trip.
func PriceOf(ctx context.Context, conn db.Batcher, snap Snapshot, userID int64, coupon string,
	along func(b *pgx.Batch, skuIDs []int64)) (Checkout, error) {
	lines := snap.Doc.Lines()
	b := &pgx.Batch{}
	var quote pricing.Quote
	var refused error
	pricing.QueueCompute(b, lines, &quote, &refused)
	if refused == nil && along != nil {
		along(b, skuIDsOf(lines))
	}
	if b.Len() > 0 {
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return Checkout{}, fmt.Errorf("pricing the cart: %w", err)
		}
	}
	if refused != nil {
		return Checkout{}, fmt.Errorf("pricing the cart: %w", refused)
	}
	c := Checkout{Cart: snap, Quote: quote}
	if coupon != "" {
		var err error
		if c.Quote, c.Coupon, err = pricing.WithCoupon(ctx, conn, quote, coupon, userID); err != nil {
			return Checkout{}, fmt.Errorf("applying the coupon: %w", err)
		}
	}
	return c, nil
}

// skuIDsOf are the SKUs of lines, each once, in the order they first come.
func skuIDsOf(lines []pricing.Line) []int64 {
	ids := make([]int64, 0, len(lines))
	for _, l := range lines {
		if !slices.Contains(ids, l.SKUID) {
			ids = append(ids, l.SKUID)
		}
	}
	return ids
}

// SubtotalMinor is the total before the coupon.
func (c Checkout) SubtotalMinor() int64 {
	if c.Quote.Coupon == nil {
		return c.Quote.TotalMinor
	}
	return c.Quote.TotalMinor + c.Quote.Coupon.DiscountMinor
}

// Refusal is why an order of this checkout, placed with the priceVersion the shopper confirmed,
// is refused before anything is written (nil: none), in the order they are checked: a line over
// its SKU's maxPerOrder (CART_INVALID, skuIds named; the preview warns QUANTITY_LIMIT), the
// coupon's refusal (its COUPON_* code, as the preview names it), prices other than those confirmed
// (PRICE_CHANGED, with the priceVersion to confirm now).
func (c Checkout) Refusal(priceVersion string) *problem.Error {
	for _, it := range c.Quote.Items {
		if it.Quantity > it.MaxPerOrder {
			return problem.New(problem.CartInvalid, fmt.Sprintf("sku %d: at most %d per order", it.SKUID, it.MaxPerOrder)).
				WithDetails(problem.SKUsDetails{SKUIDs: []int64{it.SKUID}})
		}
	}
	if c.Coupon != nil {
		return c.Coupon.Problem()
	}
	if c.Quote.PriceVersion != priceVersion {
		return problem.New(problem.PriceChanged, "prices changed since the preview").
			WithDetails(pricing.PriceChangedDetails{PriceVersion: c.Quote.PriceVersion})
	}
	return nil
}
