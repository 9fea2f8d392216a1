package api

import (
	"bytes"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

// Warning codes of the checkout preview.
const (
	WarnPriceChanged  = "PRICE_CHANGED"
	WarnLowStock      = "LOW_STOCK"
	WarnOutOfStock    = "OUT_OF_STOCK"
	WarnQuantityLimit = "QUANTITY_LIMIT"
)

type previewItem struct {
	SKUID      int64  `json:"skuId"`
	SellerID   int64  `json:"sellerId"`
	Title      string `json:"title"`
	Quantity   int32  `json:"quantity"`
	UnitPrice  string `json:"unitPrice"`
	LineTotal  string `json:"lineTotal"`
	Currency   string `json:"currency"`
	PriceAtAdd string `json:"priceAtAdd,omitempty"`
	// Stock is the line's stock hint as the cart gives it (IN_STOCK, LOW_STOCK, OUT_OF_STOCK), and
	// Available its sellable units only when they are at or below the low-stock threshold.
	Stock     string `json:"stock,omitempty"`
	Available *int32 `json:"available,omitempty"`
	campaignPrice
}

// campaignPrice is what campaigns took off a line: the list price, the discount per unit and the
// campaigns that gave it (absent when none applies).
type campaignPrice struct {
	ListPrice string  `json:"listPrice,omitempty"`
	Discount  string  `json:"discount,omitempty"`
	Campaigns []int64 `json:"campaigns,omitempty"`
}

func campaignPriceOf(it pricing.Item) campaignPrice {
	if len(it.Campaigns) == 0 {
		return campaignPrice{}
	}
	return campaignPrice{ListPrice: money.FormatIn(it.ListPriceMinor, it.Currency),
		Discount: money.FormatIn(it.ListPriceMinor-it.UnitPriceMinor, it.Currency), Campaigns: it.Campaigns}
}

type previewWarning struct {
	SKUID     int64  `json:"skuId"`
	Code      string `json:"code"`
	Old       string `json:"old,omitempty"`
	New       string `json:"new,omitempty"`
	Available *int32 `json:"available,omitempty"`
	Requested int32  `json:"requested,omitempty"`
	Max       int32  `json:"max,omitempty"`
}

// previewRequest is the preview's optional body.
type previewRequest struct {
	CouponCode string `json:"couponCode"`
}

// couponView says whether the coupon applies, and what it takes off or why not.
type couponView struct {
	Code     string       `json:"code"`
	Applies  bool         `json:"applies"`
	Discount string       `json:"discount,omitempty"`
	Reason   problem.Code `json:"reason,omitempty"`
	Message  string       `json:"message,omitempty"`
}

type previewResponse struct {
	Items        []previewItem    `json:"items"`
	Subtotal     string           `json:"subtotal"`
	Coupon       *couponView      `json:"coupon,omitempty"`
	Total        string           `json:"total"`
	Currency     string           `json:"currency"`
	PriceVersion string           `json:"priceVersion"`
	Warnings     []previewWarning `json:"warnings"`
	// Omitted names what a feature switch left out of the answer (preview_stock_warnings: no
	// stock figures or stock warnings).
	Omitted []string `json:"omitted,omitempty"`
}

// preview prices the member cart as POST /orders does (cart.Price: from the catalog now, never from
// priceAtAdd), so it refuses the same carts with the same codes and its priceVersion is the one the
// order compares against; what the order would refuse a priceable cart for, it warns about or says
// of the coupon. It asks the inventory, not the projection, how much is sellable (unless the
// preview_stock_warnings switch is off: then it reads no stock), and shows it as the cart does:
// hints, with a count only at or below the low-stock threshold. A count above it would tell anyone
// with a cart every SKU's exact stock, one preview at a time.
func (h *cartHandlers) preview(c echo.Context) error {
	ctx := c.Request().Context()
	var req previewRequest
	if body, err := readBody(c); err != nil {
		return err
	} else if len(bytes.TrimSpace(body)) > 0 {
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		if err := bind(c, &req); err != nil {
			return err
		}
		if req.CouponCode != "" && !couponRe.MatchString(req.CouponCode) {
			return validation{{Field: "couponCode", Message: "3 to 32 letters, digits, - or _"}}.err()
		}
	}
	// The stock of the cart's SKUs is read in the round trip that prices them.
	var sellable map[int64]int32
	stock := h.Features.Enabled(ctx, features.PreviewStockWarnings)
	var along func(*pgx.Batch, []int64)
	if stock {
		along = func(b *pgx.Batch, ids []int64) { availability.QueueSellable(b, ids, &sellable) }
	}
	checkout, err := cart.Price(ctx, h.Pool, mustPrincipal(c).UserID, pricing.NormalCode(req.CouponCode), along)
	if err != nil {
		return err
	}
	quote, snap := checkout.Quote, checkout.Cart
	var coupon *couponView
	if req.CouponCode != "" {
		coupon = &couponView{Code: pricing.NormalCode(req.CouponCode), Applies: checkout.Coupon == nil}
		if checkout.Coupon != nil {
			refused := couponRefused()
			coupon.Reason, coupon.Message = refused.Code, refused.Message
		} else {
			coupon.Discount = money.FormatIn(quote.Coupon.DiscountMinor, quote.Currency)
		}
	}
	out := previewResponse{Items: make([]previewItem, len(quote.Items)), Subtotal: money.FormatIn(checkout.SubtotalMinor(), quote.Currency),
		Coupon: coupon, Total: money.FormatIn(quote.TotalMinor, quote.Currency),
		Currency: quote.Currency, PriceVersion: quote.PriceVersion, Warnings: []previewWarning{}}
	if !stock {
		out.Omitted = []string{string(features.PreviewStockWarnings)}
	}
	atAdd := make(map[int64]string, len(snap.Doc.Items))
	for _, it := range snap.Doc.Items {
		atAdd[it.SKUID] = it.PriceAtAdd
	}
	threshold := int32(h.Options.LowStockThreshold)
	for i, it := range quote.Items {
		price := money.FormatIn(it.UnitPriceMinor, it.Currency)
		out.Items[i] = previewItem{SKUID: it.SKUID, SellerID: it.SellerID, Title: it.Title, Quantity: it.Quantity,
			UnitPrice: price, LineTotal: money.FormatIn(it.LineTotalMinor, it.Currency), Currency: it.Currency,
			PriceAtAdd: atAdd[it.SKUID], campaignPrice: campaignPriceOf(it)}
		if old := atAdd[it.SKUID]; old != "" && old != price {
			out.Warnings = append(out.Warnings, previewWarning{SKUID: it.SKUID, Code: WarnPriceChanged, Old: old, New: price})
		}
		if it.Quantity > it.MaxPerOrder {
			out.Warnings = append(out.Warnings, previewWarning{SKUID: it.SKUID, Code: WarnQuantityLimit,
				Requested: it.Quantity, Max: it.MaxPerOrder})
		}
		if !stock {
			continue
		}
		avail := max(sellable[it.SKUID], 0)
		out.Items[i].Stock = availability.Hint(avail, true, threshold)
		var shown *int32 // the count, only as low as the cart shows it
		if avail <= threshold {
			shown = &avail
		}
		out.Items[i].Available = shown
		switch {
		case avail == 0:
			out.Warnings = append(out.Warnings, previewWarning{SKUID: it.SKUID, Code: WarnOutOfStock,
				Available: shown, Requested: it.Quantity})
		case avail <= threshold || avail < it.Quantity:
			// Fewer units than the line asks for: LOW_STOCK, without the count above the threshold.
			out.Warnings = append(out.Warnings, previewWarning{SKUID: it.SKUID, Code: WarnLowStock,
				Available: shown, Requested: it.Quantity})
		}
	}
	return c.JSON(http.StatusOK, out)
}
