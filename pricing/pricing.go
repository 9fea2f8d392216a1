// Package pricing computes what a list of cart lines costs now, from the catalog's prices and the
// campaigns in force, and a priceVersion that names exactly those prices and campaigns: the
// checkout preview shows it, and an order placed with a different one is refused (the shopper
// never pays a price they did not see).
package pricing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing/internal/pricingstore"
)

// Line is a SKU and a quantity.
type Line struct {
	SKUID    int64 `json:"skuId"`
	Quantity int32 `json:"quantity"`
}

// Item is a priced line.
type Item struct {
	SKUID          int64  `json:"skuId"`
	SellerID       int64  `json:"sellerId"`
	Title          string `json:"title"`
	Quantity       int32  `json:"quantity"`
	UnitPriceMinor int64  `json:"unitPriceMinor"`
	LineTotalMinor int64  `json:"lineTotalMinor"`
	Currency       string `json:"currency"`
	MaxPerOrder    int32  `json:"maxPerOrder"`
	// ListPriceMinor is the catalog's unit price before campaigns, and Campaigns the campaigns
	// that took it down to UnitPriceMinor (both empty when none applies).
	ListPriceMinor int64   `json:"listPriceMinor,omitempty"`
	Campaigns      []int64 `json:"campaigns,omitempty"`
}

// Campaign is a discount in force on a SKU.
type Campaign struct {
	ID int64 `json:"id"`
	// Kind is PERCENT (Value in basis points of the price) or FIXED (Value in minor units of
	// Currency, off each unit).
	Kind      string `json:"kind"`
	Value     int64  `json:"value"`
	Currency  string `json:"currency,omitempty"`
	Priority  int32  `json:"priority"`
	Stackable bool   `json:"stackable"`
}

// Campaign kinds.
const (
	CampaignPercent = "PERCENT"
	CampaignFixed   = "FIXED"
)

// Discounted is a unit price after the campaigns in force, given highest priority first: the
// first applies, and the next ones too while it and they stack; each takes its share of what the
// ones before left. A fixed discount in another currency does not apply; no price goes below zero.
// It returns the price and the campaigns that applied.
func Discounted(list int64, currency string, campaigns []Campaign) (int64, []int64) {
	price := list
	var applied []int64
	stacking := true
	for _, c := range campaigns {
		if c.Kind == CampaignFixed && c.Currency != currency {
			continue
		}
		if len(applied) > 0 && (!stacking || !c.Stackable) {
			break
		}
		stacking = c.Stackable
		off := c.Value
		if c.Kind == CampaignPercent {
			off = price * min(c.Value, 10000) / 10000
		}
		price = max(price-off, 0)
		applied = append(applied, c.ID)
	}
	return price, applied
}

// Apply is Discounted with the campaigns as the database lists them (campaigns_in_force).
func Apply(list int64, currency string, campaignsJSON []byte) (int64, []int64, error) {
	var campaigns []Campaign
	if err := json.Unmarshal(campaignsJSON, &campaigns); err != nil {
		return 0, nil, err
	}
	unit, applied := Discounted(list, currency, campaigns)
	return unit, applied, nil
}

// Quote is the price of a list of lines now.
type Quote struct {
	Items        []Item `json:"items"`
	TotalMinor   int64  `json:"totalMinor"`
	Currency     string `json:"currency"`
	PriceVersion string `json:"priceVersion"`
	// Coupon is the coupon taken off TotalMinor (nil: none).
	Coupon *AppliedCoupon `json:"coupon,omitempty"`
}

// Refusals of a quote, coded as the checkout answers them. ErrUnknownSKUs comes with the SKUs
// that are not (or no longer) in the catalog (details "skuIds").
var (
	ErrEmpty         = problem.New(problem.CartEmpty, "the cart is empty")
	ErrMixedCurrency = problem.New(problem.MixedCurrency,
		"the cart holds items priced in more than one currency; order them separately")
	ErrUnknownSKUs = problem.New(problem.CartInvalid, "some SKUs of the cart are no longer sold; remove them")
)

// Compute prices lines from the catalog. Lines of the same SKU are summed; items come back in SKU
// order.
func Compute(ctx context.Context, conn db.DBTX, lines []Line) (Quote, error) {
	ids, qty, err := skusOf(lines)
	if err != nil {
		return Quote{}, err
	}
	rows, err := pricingstore.New(conn).PricedSKUs(ctx, ids)
	if err != nil {
		return Quote{}, fmt.Errorf("pricing SKUs %v: %w", ids, err)
	}
	return quoteOf(ids, qty, rows)
}

// QueueCompute is Compute with its read queued on b, to go with the caller's other reads in one
// round trip. Once the batch is read, *dst is the quote, or *refused is what Compute would have
// refused the lines with; lines that need no read (none to price) are refused at once, with nothing
// queued. A failed read is the batch's error.
func QueueCompute(b *pgx.Batch, lines []Line, dst *Quote, refused *error) {
	ids, qty, err := skusOf(lines)
	if err != nil {
		*refused = err
		return
	}
	db.QueueRows(b, pricingstore.PricedSKUsSQL, []any{ids}, func(rows []pricingstore.PricedSKUsRow) {
		*dst, *refused = quoteOf(ids, qty, rows)
	})
}

// skusOf sums lines by SKU, the SKUs in order.
func skusOf(lines []Line) ([]int64, map[int64]int32, error) {
	qty := map[int64]int32{}
	for _, l := range lines {
		if l.Quantity > 0 {
			qty[l.SKUID] += l.Quantity
		}
	}
	if len(qty) == 0 {
		return nil, nil, ErrEmpty
	}
	ids := make([]int64, 0, len(qty))
	for id := range qty {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, qty, nil
}

// quoteOf prices the SKUs ids, qty of each, from their catalog rows.
func quoteOf(ids []int64, qty map[int64]int32, rows []pricingstore.PricedSKUsRow) (Quote, error) {
	found := map[int64]pricingstore.PricedSKUsRow{}
	for _, r := range rows {
		found[r.ID] = r
	}
	var missing []int64
	var quote Quote
	for _, id := range ids {
		r, ok := found[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		if quote.Currency == "" {
			quote.Currency = r.Currency
		} else if quote.Currency != r.Currency {
			return Quote{}, ErrMixedCurrency
		}
		unit, applied, err := Apply(r.PriceMinor, r.Currency, r.Campaigns)
		if err != nil {
			return Quote{}, fmt.Errorf("campaigns of SKU %d: %w", id, err)
		}
		it := Item{SKUID: id, SellerID: r.SellerID, Title: r.Title, Quantity: qty[id],
			UnitPriceMinor: unit, LineTotalMinor: unit * int64(qty[id]),
			Currency: r.Currency, MaxPerOrder: r.MaxPerOrder}
		if len(applied) > 0 {
			it.ListPriceMinor, it.Campaigns = r.PriceMinor, applied
		}
		quote.Items = append(quote.Items, it)
		quote.TotalMinor += it.LineTotalMinor
	}
	if len(missing) > 0 {
		return Quote{}, ErrUnknownSKUs.WithDetails(problem.SKUsDetails{SKUIDs: missing})
	}
	if quote.TotalMinor > money.MaxMinor {
		return Quote{}, fmt.Errorf("total %d exceeds the largest amount", quote.TotalMinor)
	}
	quote.PriceVersion = Version(quote.Items)
	return quote, nil
}

// Version names exactly these items at these prices: any change of a SKU, a quantity, a unit
// price, a currency or the campaigns that gave a price gives another version. (A line without
// campaigns hashes as it did before campaigns existed.)
func Version(items []Item) string { return VersionOf(items, nil) }

// VersionOf is Version with the coupon the total applies, which it names too.
func VersionOf(items []Item, coupon *AppliedCoupon) string {
	sorted := append([]Item(nil), items...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].SKUID < sorted[j].SKUID })
	var b strings.Builder
	for _, it := range sorted {
		b.WriteString(strconv.FormatInt(it.SKUID, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(int64(it.Quantity), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(it.UnitPriceMinor, 10))
		b.WriteByte(':')
		b.WriteString(it.Currency)
		for _, c := range it.Campaigns {
			b.WriteString(":c")
			b.WriteString(strconv.FormatInt(c, 10))
		}
		b.WriteByte(';')
	}
	if coupon != nil {
		fmt.Fprintf(&b, "coupon:%d:%d;", coupon.ID, coupon.DiscountMinor)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "pv_" + hex.EncodeToString(sum[:10])
}
