package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
)

// MaxCampaignSKUs bounds the SKUs one campaign names.
const MaxCampaignSKUs = 1000

// MaxSellerCampaignPriority is the highest priority a seller may give its own campaigns: the
// priorities above it are the platform's, so a campaign ops start at PlatformCampaignPriority or
// more comes before every seller's on a line, and no seller can outrank it.
const (
	MaxSellerCampaignPriority = 99
	PlatformCampaignPriority  = MaxSellerCampaignPriority + 1
)

type campaignBody struct {
	Name string `json:"name"`
	// SellerID: ops only (a seller's campaigns are its own). Without SKUIDs the campaign covers
	// every SKU of the seller.
	SellerID *int64  `json:"sellerId"`
	SKUIDs   []int64 `json:"skuIds"`
	Kind     string  `json:"kind"`
	// Value is a percentage ("12.5") for PERCENT, an amount off each unit ("50.00") for FIXED.
	Value     string     `json:"value"`
	Currency  string     `json:"currency"`
	StartsAt  *time.Time `json:"startsAt"`
	EndsAt    *time.Time `json:"endsAt"`
	Priority  int32      `json:"priority"`
	Stackable bool       `json:"stackable"`
}

type campaignView struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	SellerID  *int64    `json:"sellerId,omitempty"`
	SKUIDs    []int64   `json:"skuIds,omitempty"`
	Kind      string    `json:"kind"`
	Value     string    `json:"value"`
	Currency  string    `json:"currency,omitempty"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	Priority  int32     `json:"priority"`
	Stackable bool      `json:"stackable"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
}

func viewCampaign(c pricing.StoredCampaign) campaignView {
	return campaignView{ID: c.ID, Name: c.Name, SellerID: c.SellerID, SKUIDs: c.SKUIDs, Kind: c.Kind,
		Value: discountText(c.Kind, c.Value, c.Currency), Currency: c.Currency, StartsAt: c.StartsAt, EndsAt: c.EndsAt,
		Priority: c.Priority, Stackable: c.Stackable, CreatedBy: c.CreatedBy, CreatedAt: c.CreatedAt}
}

// createCampaign starts a campaign price: ops on any SKUs or seller, a seller on its own SKUs. A
// campaign that starts or ends changes the priceVersion of the carts it covers, so an order placed
// on an older preview is refused with PRICE_CHANGED, never charged a price the shopper did not see.
func (s *Server) createCampaign(c echo.Context) error {
	var b campaignBody
	if err := bind(c, &b); err != nil {
		return err
	}
	p := mustPrincipal(c)
	if p.Role == auth.RoleSeller {
		seller := p.SellerID
		b.SellerID = &seller
	}
	params, err := s.campaignParams(c, b, p)
	if err != nil {
		return err
	}
	row, err := pricing.CreateCampaign(c.Request().Context(), s.Pool, params)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, viewCampaign(row))
}

func (s *Server) campaignParams(c echo.Context, b campaignBody, p auth.Principal) (pricing.StoredCampaign, error) {
	var v validation
	if b.Name = strings.TrimSpace(b.Name); b.Name == "" || len(b.Name) > 100 {
		v.add("name", "required, at most 100 characters")
	}
	value := discountValue(b.Kind, b.Value, b.Currency, &v)
	var currency string
	switch b.Kind {
	case pricing.CampaignPercent:
		if b.Currency != "" {
			v.add("currency", "only for FIXED")
		}
	case pricing.CampaignFixed:
		if !money.ValidCurrency(b.Currency) {
			v.add("currency", "required for FIXED: three capital letters, such as TRY")
		}
		currency = b.Currency
	default:
		v.add("kind", `"PERCENT" or "FIXED"`)
	}
	now := time.Now()
	starts := now
	if b.StartsAt != nil {
		starts = *b.StartsAt
	}
	switch {
	case b.EndsAt == nil:
		v.add("endsAt", "required")
	case !b.EndsAt.After(starts) || !b.EndsAt.After(now):
		v.add("endsAt", "after startsAt and in the future")
	}
	if b.SellerID == nil && len(b.SKUIDs) == 0 {
		v.add("skuIds", "required without sellerId")
	}
	if len(b.SKUIDs) > MaxCampaignSKUs {
		v.add("skuIds", fmt.Sprintf("at most %d", MaxCampaignSKUs))
	}
	if p.Role == auth.RoleSeller && (b.Priority < 0 || b.Priority > MaxSellerCampaignPriority) {
		v.add("priority", fmt.Sprintf("a seller's campaigns take a priority from 0 to %d (above it: the platform's)",
			MaxSellerCampaignPriority))
	}
	if err := v.err(); err != nil {
		return pricing.StoredCampaign{}, err
	}
	ctx := c.Request().Context()
	var skus []int64
	if len(b.SKUIDs) > 0 {
		skus = slices.Compact(slices.Sorted(slices.Values(b.SKUIDs)))
		found, err := inventory.SKUs(ctx, s.Pool, skus)
		if err != nil {
			return pricing.StoredCampaign{}, err
		}
		owner := map[int64]int64{}
		for _, r := range found {
			owner[r.ID] = r.SellerID
		}
		for i, id := range skus {
			seller, ok := owner[id]
			switch {
			case !ok:
				v.add("skuIds["+strconv.Itoa(i)+"]", fmt.Sprintf("SKU %d is not in the catalog", id))
			case b.SellerID != nil && seller != *b.SellerID:
				v.add("skuIds["+strconv.Itoa(i)+"]", fmt.Sprintf("SKU %d is not seller %d's", id, *b.SellerID))
			}
		}
	} else if ok, err := inventory.SellerExists(ctx, s.Pool, *b.SellerID); err != nil {
		return pricing.StoredCampaign{}, err
	} else if !ok {
		v.add("sellerId", "no such seller")
	}
	if err := v.err(); err != nil {
		return pricing.StoredCampaign{}, err
	}
	return pricing.StoredCampaign{Name: b.Name, SellerID: b.SellerID, SKUIDs: skus, Kind: b.Kind, Value: value,
		Currency: currency, StartsAt: starts, EndsAt: *b.EndsAt, Priority: b.Priority, Stackable: b.Stackable,
		CreatedBy: string(p.Role) + ":" + strconv.FormatInt(principalID(p), 10)}, nil
}

// discountValue reads a campaign's or a coupon's value: a percentage in basis points for PERCENT
// ("12.5" is 1250), an amount in the currency's minor units for FIXED ("50" JPY is 50, "50.00"
// TRY is 5000). A FIXED value in a currency that is not one is left to the currency's own check.
func discountValue(kind, value, currency string, v *validation) int64 {
	var (
		n   int64
		err error
	)
	switch {
	case kind == pricing.CampaignFixed && !money.ValidCurrency(currency):
		return 0
	case kind == pricing.CampaignFixed:
		n, err = money.Parse(value, currency)
	default:
		n, err = money.ParseDecimal(value, money.PercentDigits)
	}
	switch {
	case err != nil || n <= 0:
		v.add("value", `a positive decimal string: a percentage ("12.5") or an amount in the currency's minor unit ("50.00" TRY, "50" JPY)`)
	case kind == pricing.CampaignPercent && n > 10000:
		v.add("value", "a percentage of at most 100")
	}
	return n
}

// discountText writes a discount value as discountValue reads it.
func discountText(kind string, value int64, currency string) string {
	if kind == pricing.CampaignFixed {
		return money.FormatIn(value, currency)
	}
	return money.FormatDecimal(value, money.PercentDigits)
}

// principalID names who made a change: the seller for a seller, the user otherwise.
func principalID(p auth.Principal) int64 {
	if p.Role == auth.RoleSeller {
		return p.SellerID
	}
	return p.UserID
}

// sellerScope is the seller whose campaigns the caller sees and ends (nil: ops, every one).
func sellerScope(p auth.Principal) *int64 {
	if p.Role == auth.RoleSeller {
		id := p.SellerID
		return &id
	}
	return nil
}

// listCampaigns lists the campaigns not yet ended: a seller's own, or all for ops.
func (s *Server) listCampaigns(c echo.Context) error {
	rows, err := pricing.Campaigns(c.Request().Context(), s.Pool, sellerScope(mustPrincipal(c)))
	if err != nil {
		return err
	}
	out := make([]campaignView, len(rows))
	for i, r := range rows {
		out[i] = viewCampaign(r)
	}
	return c.JSON(http.StatusOK, map[string]any{"campaigns": out})
}

// endCampaign ends a campaign now; a seller ends only its own.
func (s *Server) endCampaign(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("campaignId"), 10, 64)
	if err != nil || id <= 0 {
		return notFound()
	}
	row, err := pricing.EndCampaign(c.Request().Context(), s.Pool, id, sellerScope(mustPrincipal(c)))
	if db.NotFound(err) {
		return notFound()
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewCampaign(row))
}
