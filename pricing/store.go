package pricing

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing/internal/pricingstore"
)

// Redeem spends one redemption of the order's coupon in the order's transaction tx: one
// conditional statement decides, under the shopper's coupon lock. A refusal (*CouponRefusal)
// rolls the order back with it.
func Redeem(ctx context.Context, tx db.DBTX, orderID, userID int64, c AppliedCoupon) error {
	if err := db.LockUser(ctx, tx, db.LockCoupons, userID); err != nil {
		return err
	}
	q := pricingstore.New(tx)
	_, err := q.RedeemCoupon(ctx, pricingstore.RedeemCouponParams{CouponID: c.ID, UserID: userID, OrderID: orderID,
		DiscountMinor: c.DiscountMinor})
	if !db.NotFound(err) {
		return err
	}
	// Say why, as the preview would now.
	now, err := q.CouponByCode(ctx, userID, c.Code)
	if err != nil {
		return err
	}
	if refusal := unavailable(now); refusal != nil {
		return refusal
	}
	// A redemption given back since the statement ran: the refusal stands.
	return &CouponRefusal{Code: problem.CouponUsedUp, Message: "the coupon has been used up"}
}

// SettleRedemption settles the order's held redemption, in the transaction tx that ends the
// order in orderStatus: spent when CONFIRMED, given back otherwise. No held redemption: nothing.
func SettleRedemption(ctx context.Context, tx db.DBTX, orderID int64, orderStatus string) error {
	return pricingstore.New(tx).SettleCouponRedemption(ctx, orderStatus, orderID)
}

// CouponOfOrder is the coupon the order was made with (nil: none).
func CouponOfOrder(ctx context.Context, conn db.DBTX, orderID int64) (*AppliedCoupon, error) {
	c, err := pricingstore.New(conn).CouponOfOrder(ctx, orderID)
	if db.NotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &AppliedCoupon{ID: c.ID, Code: c.Code, DiscountMinor: c.DiscountMinor}, nil
}

// StoredCampaign is a campaign as ops and sellers set it: a discount (Kind, Value: basis points
// for PERCENT, minor units of Currency for FIXED) on SKUIDs, or on every SKU of SellerID, from
// StartsAt to EndsAt. (Campaign is one in force on a SKU, as a price is worked out.)
type StoredCampaign struct {
	ID        int64
	Name      string
	SellerID  *int64
	SKUIDs    []int64
	Kind      string
	Value     int64
	Currency  string // FIXED only
	StartsAt  time.Time
	EndsAt    time.Time
	Priority  int32
	Stackable bool
	CreatedBy string
	CreatedAt time.Time
}

func campaignOf(r pricingstore.Campaign) StoredCampaign {
	return StoredCampaign{ID: r.ID, Name: r.Name, SellerID: r.SellerID, SKUIDs: r.SkuIds, Kind: r.Kind, Value: r.Value,
		Currency: r.Currency.String, StartsAt: r.StartsAt, EndsAt: r.EndsAt, Priority: r.Priority,
		Stackable: r.Stackable, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

// CreateCampaign writes the campaign c (its ID and CreatedAt are the database's).
func CreateCampaign(ctx context.Context, conn db.DBTX, c StoredCampaign) (StoredCampaign, error) {
	r, err := pricingstore.New(conn).InsertCampaign(ctx, pricingstore.InsertCampaignParams{Name: c.Name,
		SellerID: c.SellerID, SkuIds: c.SKUIDs, Kind: c.Kind, Value: c.Value,
		Currency: pgtype.Text{String: c.Currency, Valid: c.Currency != ""}, StartsAt: c.StartsAt, EndsAt: c.EndsAt,
		Priority: c.Priority, Stackable: c.Stackable, CreatedBy: c.CreatedBy})
	return campaignOf(r), err
}

// Campaigns lists the campaigns not yet ended, newest first: seller's, or all (seller nil).
func Campaigns(ctx context.Context, conn db.DBTX, seller *int64) ([]StoredCampaign, error) {
	rows, err := pricingstore.New(conn).ListCampaigns(ctx, seller)
	out := make([]StoredCampaign, len(rows))
	for i, r := range rows {
		out[i] = campaignOf(r)
	}
	return out, err
}

// EndCampaign ends the campaign now (seller's only, unless seller is nil); none such is an error
// db.NotFound recognises.
func EndCampaign(ctx context.Context, conn db.DBTX, id int64, seller *int64) (StoredCampaign, error) {
	r, err := pricingstore.New(conn).EndCampaign(ctx, id, seller)
	return campaignOf(r), err
}

// Coupon is a coupon as ops set it: a discount (Kind, Value as a StoredCampaign's) off the eligible
// items (SKUIDs, or SellerID's, or all) of a basket of at least MinBasketMinor.
type Coupon struct {
	ID               int64
	Code             string
	Kind             string
	Value            int64
	MaxDiscountMinor *int64
	Currency         string
	MinBasketMinor   int64
	StartsAt         time.Time
	EndsAt           time.Time
	MaxRedemptions   int32
	MaxPerShopper    int32
	SellerID         *int64
	SKUIDs           []int64
	Redeemed         int32
	CreatedBy        string
	CreatedAt        time.Time
}

func couponOf(r pricingstore.Coupon) Coupon {
	return Coupon{ID: r.ID, Code: r.Code, Kind: r.Kind, Value: r.Value, MaxDiscountMinor: r.MaxDiscountMinor,
		Currency: r.Currency, MinBasketMinor: r.MinBasketMinor, StartsAt: r.StartsAt, EndsAt: r.EndsAt,
		MaxRedemptions: r.MaxRedemptions, MaxPerShopper: r.MaxPerShopper, SellerID: r.SellerID, SKUIDs: r.SkuIds,
		Redeemed: r.Redeemed, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

// CreateCoupon writes the coupon c (its ID, Redeemed and CreatedAt are the database's).
func CreateCoupon(ctx context.Context, conn db.DBTX, c Coupon) (Coupon, error) {
	r, err := pricingstore.New(conn).InsertCoupon(ctx, pricingstore.InsertCouponParams{Code: c.Code, Kind: c.Kind,
		Value: c.Value, MaxDiscountMinor: c.MaxDiscountMinor, Currency: c.Currency, MinBasketMinor: c.MinBasketMinor,
		StartsAt: c.StartsAt, EndsAt: c.EndsAt, MaxRedemptions: c.MaxRedemptions, MaxPerShopper: c.MaxPerShopper,
		SellerID: c.SellerID, SkuIds: c.SKUIDs, CreatedBy: c.CreatedBy})
	return couponOf(r), err
}

// Coupons lists the coupons not yet ended, newest first.
func Coupons(ctx context.Context, conn db.DBTX) ([]Coupon, error) {
	rows, err := pricingstore.New(conn).ListCoupons(ctx)
	out := make([]Coupon, len(rows))
	for i, r := range rows {
		out[i] = couponOf(r)
	}
	return out, err
}
