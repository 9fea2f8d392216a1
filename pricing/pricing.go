// Package pricing computes what a list of cart lines costs now, from the catalog's prices, and a
// priceVersion that names exactly those prices: the checkout preview shows it, and an order placed
// with a different one is refused (the shopper never pays a price they did not see).
package pricing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
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
}

// Quote is the price of a list of lines now.
type Quote struct {
	Items        []Item `json:"items"`
	TotalMinor   int64  `json:"totalMinor"`
	Currency     string `json:"currency"`
	PriceVersion string `json:"priceVersion"`
}

// Errors of a quote.
var (
	ErrEmpty         = errors.New("nothing to price")
	ErrMixedCurrency = errors.New("items are priced in more than one currency")
)

// UnknownSKUError names SKUs that are not (or no longer) in the catalog.
type UnknownSKUError struct{ SKUIDs []int64 }

func (e *UnknownSKUError) Error() string { return fmt.Sprintf("unknown SKUs %v", e.SKUIDs) }

// Compute prices lines from the catalog. Lines of the same SKU are summed; items come back in SKU
// order.
func Compute(ctx context.Context, q *db.Queries, lines []Line) (Quote, error) {
	qty := map[int64]int32{}
	for _, l := range lines {
		if l.Quantity > 0 {
			qty[l.SKUID] += l.Quantity
		}
	}
	if len(qty) == 0 {
		return Quote{}, ErrEmpty
	}
	ids := make([]int64, 0, len(qty))
	for id := range qty {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	rows, err := q.SKUsByIDs(ctx, ids)
	if err != nil {
		return Quote{}, err
	}
	found := map[int64]db.SKUsByIDsRow{}
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
		it := Item{SKUID: id, SellerID: r.SellerID, Title: r.Title, Quantity: qty[id],
			UnitPriceMinor: r.PriceMinor, LineTotalMinor: r.PriceMinor * int64(qty[id]),
			Currency: r.Currency, MaxPerOrder: r.MaxPerOrder}
		quote.Items = append(quote.Items, it)
		quote.TotalMinor += it.LineTotalMinor
	}
	if len(missing) > 0 {
		return Quote{}, &UnknownSKUError{SKUIDs: missing}
	}
	if quote.TotalMinor > money.MaxMinor {
		return Quote{}, fmt.Errorf("total %d exceeds the largest amount", quote.TotalMinor)
	}
	quote.PriceVersion = Version(quote.Items)
	return quote, nil
}

// Version names exactly these items at these prices: any change of a SKU, a quantity, a unit
// price or a currency gives another version.
func Version(items []Item) string {
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
		b.WriteByte(';')
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "pv_" + hex.EncodeToString(sum[:10])
}
