package webhooks

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/money"
)

// Subscribable are the event types a seller's endpoint may receive: its own SKUs' orders.
var Subscribable = []string{events.OrderCreated, events.OrderConfirmed, events.OrderFailed, events.OrderCancelled,
	events.OrderLineCancelled, events.OrderStockShortfall}

// DataSchema names the schema of what a seller receives for a type (events/schemas/webhook.*).
func DataSchema(typ string) string { return "urn:checkout:webhooks:" + typ + ":v1" }

// SellerOrder is what a seller receives of order.created, .confirmed, .failed and .cancelled: the
// order with its own lines only, and their subtotal; never another seller's lines, the order's
// total or the shopper.
type SellerOrder struct {
	OrderID     int64              `json:"orderId"`
	Status      string             `json:"status"`
	FailureCode string             `json:"failureCode,omitempty"`
	Currency    string             `json:"currency"`
	PlacedAt    time.Time          `json:"placedAt"`
	Items       []events.OrderItem `json:"items"`
	Subtotal    string             `json:"subtotal"`
}

// SellerLineCancelled is order.line_cancelled as its seller receives it (no shopper).
type SellerLineCancelled struct {
	OrderID       int64  `json:"orderId"`
	SKUID         int64  `json:"skuId"`
	Units         int32  `json:"units"`
	Reason        string `json:"reason"`
	Refund        string `json:"refund"`
	Currency      string `json:"currency"`
	Restocked     bool   `json:"restocked"`
	LineQuantity  int32  `json:"lineQuantity"`
	LineCancelled int32  `json:"lineCancelled"`
}

// Sellers are the sellers an event concerns: those with lines in the order, or the one it names.
func Sellers(e events.Envelope) ([]int64, error) {
	switch e.Type {
	case events.OrderCreated, events.OrderConfirmed, events.OrderFailed, events.OrderCancelled:
		var o events.Order
		if err := json.Unmarshal(e.Data, &o); err != nil {
			return nil, err
		}
		var out []int64
		for _, it := range o.Items {
			if !slices.Contains(out, it.SellerID) {
				out = append(out, it.SellerID)
			}
		}
		return out, nil
	case events.OrderLineCancelled, events.OrderStockShortfall:
		var d struct {
			SellerID int64 `json:"sellerId"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return nil, err
		}
		return []int64{d.SellerID}, nil
	}
	return nil, nil
}

// SellerBody is the body a seller receives for an event: the same CloudEvents envelope (id,
// type, time…) whose data holds what is the seller's own.
func SellerBody(e events.Envelope, sellerID int64) ([]byte, error) {
	var data any
	switch e.Type {
	case events.OrderCreated, events.OrderConfirmed, events.OrderFailed, events.OrderCancelled:
		var o events.Order
		if err := json.Unmarshal(e.Data, &o); err != nil {
			return nil, err
		}
		v := SellerOrder{OrderID: o.OrderID, Status: o.Status, FailureCode: o.FailureCode, Currency: o.Currency,
			PlacedAt: o.PlacedAt, Items: []events.OrderItem{}}
		var subtotal int64
		for _, it := range o.Items {
			if it.SellerID != sellerID {
				continue
			}
			v.Items = append(v.Items, it)
			if unit, err := money.Parse(it.UnitPrice, o.Currency); err == nil {
				subtotal += unit * int64(it.Quantity)
			}
		}
		v.Subtotal = money.FormatIn(subtotal, o.Currency)
		data = v
	case events.OrderLineCancelled:
		var d events.LineCancelled
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return nil, err
		}
		data = SellerLineCancelled{OrderID: d.OrderID, SKUID: d.SKUID, Units: d.Units, Reason: d.Reason, Refund: d.Refund,
			Currency: d.Currency, Restocked: d.Restocked, LineQuantity: d.LineQuantity, LineCancelled: d.LineCancelled}
	default:
		data = e.Data // order.stock_shortfall: already the seller's alone
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	out := e
	out.Data, out.DataSchema = b, DataSchema(e.Type)
	return json.Marshal(out)
}
