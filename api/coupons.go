package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

type couponBody struct {
	Code string `json:"code"`
	Kind string `json:"kind"`
	// Value is a percentage ("10") for PERCENT, an amount ("50.00") for FIXED.
	Value          string     `json:"value"`
	MaxDiscount    string     `json:"maxDiscount"`
	Currency       string     `json:"currency"`
	MinBasket      string     `json:"minBasket"`
	StartsAt       *time.Time `json:"startsAt"`
	EndsAt         *time.Time `json:"endsAt"`
	MaxRedemptions int32      `json:"maxRedemptions"`
	MaxPerShopper  *int32     `json:"maxPerShopper"`
	SellerID       *int64     `json:"sellerId"`
	SKUIDs         []int64    `json:"skuIds"`
}

type couponAdminView struct {
	ID             int64     `json:"id"`
	Code           string    `json:"code"`
	Kind           string    `json:"kind"`
	Value          string    `json:"value"`
	MaxDiscount    string    `json:"maxDiscount,omitempty"`
	Currency       string    `json:"currency"`
	MinBasket      string    `json:"minBasket"`
	StartsAt       time.Time `json:"startsAt"`
	EndsAt         time.Time `json:"endsAt"`
	MaxRedemptions int32     `json:"maxRedemptions"`
	MaxPerShopper  int32     `json:"maxPerShopper"`
	Redeemed       int32     `json:"redeemed"`
	SellerID       *int64    `json:"sellerId,omitempty"`
	SKUIDs         []int64   `json:"skuIds,omitempty"`
}

func viewCoupon(c pricing.Coupon) couponAdminView {
	v := couponAdminView{ID: c.ID, Code: c.Code, Kind: c.Kind, Value: discountText(c.Kind, c.Value, c.Currency),
		Currency: c.Currency, MinBasket: money.FormatIn(c.MinBasketMinor, c.Currency), StartsAt: c.StartsAt, EndsAt: c.EndsAt,
		MaxRedemptions: c.MaxRedemptions, MaxPerShopper: c.MaxPerShopper, Redeemed: c.Redeemed, SellerID: c.SellerID,
		SKUIDs: c.SKUIDs}
	if c.MaxDiscountMinor != nil {
		v.MaxDiscount = money.FormatIn(*c.MaxDiscountMinor, c.Currency)
	}
	return v
}

// createCoupon makes a coupon (ops). Coupons are never edited: a wrong one is ended by making its
// window end (a new coupon with a new code replaces it), so every order keeps what it was given.
func (s *Server) createCoupon(c echo.Context) error {
	var b couponBody
	if err := bind(c, &b); err != nil {
		return err
	}
	var v validation
	code := pricing.NormalCode(b.Code)
	if !couponRe.MatchString(code) {
		v.add("code", "3 to 32 letters, digits, - or _")
	}
	if !money.ValidCurrency(b.Currency) {
		v.add("currency", "required: an ISO 4217 currency code, such as TRY")
	}
	value := discountValue(b.Kind, b.Value, b.Currency, &v)
	if b.Kind != pricing.CampaignPercent && b.Kind != pricing.CampaignFixed {
		v.add("kind", `"PERCENT" or "FIXED"`)
	}
	var maxDiscount *int64
	if b.MaxDiscount != "" {
		if m, err := money.Parse(b.MaxDiscount, b.Currency); err != nil || m <= 0 || b.Kind != pricing.CampaignPercent {
			v.add("maxDiscount", "a positive amount in the coupon's currency, for PERCENT only")
		} else {
			maxDiscount = &m
		}
	}
	var minBasket int64
	if b.MinBasket != "" && money.ValidCurrency(b.Currency) {
		var err error
		if minBasket, err = money.Parse(b.MinBasket, b.Currency); err != nil {
			v.add("minBasket", err.Error())
		}
	}
	starts := time.Now()
	if b.StartsAt != nil {
		starts = *b.StartsAt
	}
	if b.EndsAt == nil || !b.EndsAt.After(starts) || !b.EndsAt.After(time.Now()) {
		v.add("endsAt", "required: after startsAt and in the future")
	}
	if b.MaxRedemptions < 1 {
		v.add("maxRedemptions", "required: 1 or more")
	}
	perShopper := int32(1)
	if b.MaxPerShopper != nil {
		if perShopper = *b.MaxPerShopper; perShopper < 1 {
			v.add("maxPerShopper", "1 or more")
		}
	}
	if len(b.SKUIDs) > MaxCampaignSKUs {
		v.add("skuIds", "too many")
	}
	if err := v.err(); err != nil {
		return err
	}
	p := mustPrincipal(c)
	row, err := pricing.CreateCoupon(c.Request().Context(), s.Pool, pricing.Coupon{Code: code, Kind: b.Kind, Value: value,
		MaxDiscountMinor: maxDiscount, Currency: b.Currency, MinBasketMinor: minBasket, StartsAt: starts,
		EndsAt: *b.EndsAt, MaxRedemptions: b.MaxRedemptions, MaxPerShopper: perShopper, SellerID: b.SellerID,
		SKUIDs: b.SKUIDs, CreatedBy: "ops:" + strconv.FormatInt(p.UserID, 10)})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return problem.New(problem.CouponExists, "a coupon with this code exists already")
	case errors.As(err, &pgErr) && pgErr.Code == "23503":
		return validation{{Field: "sellerId", Message: "no such seller"}}.err()
	case err != nil:
		return err
	}
	return c.JSON(http.StatusCreated, viewCoupon(row))
}

// listCoupons lists the coupons not yet ended, with how many redemptions each has spent.
func (s *Server) listCoupons(c echo.Context) error {
	rows, err := pricing.Coupons(c.Request().Context(), s.Pool)
	if err != nil {
		return err
	}
	out := make([]couponAdminView, len(rows))
	for i, r := range rows {
		out[i] = viewCoupon(r)
	}
	return c.JSON(http.StatusOK, map[string]any{"coupons": out})
}
