// Package events is the contract of the events the checkout publishes (docs/events.md): each
// event's type, its data as published, and the CloudEvents 1.0 envelope around it, built from the
// outbox row the change wrote in its own transaction. The JSON Schema of each type's data is
// embedded (schemas/), and a test holds what the relay publishes against them.
//
// The stored payload of an outbox row is ours to change; the published data is a contract. Build
// turns the one into the other, so a change of storage never changes what consumers read, and a
// change of what they read is a new schema version.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/marketplace/checkout/internal/money"
)

// Event types, as published (CloudEvents type) and as stored in the outbox.
const (
	OrderCreated       = "order.created"
	OrderConfirmed     = "order.confirmed"
	OrderFailed        = "order.failed"
	OrderCancelled     = "order.cancelled"
	OrderLineCancelled = "order.line_cancelled"
	// OrderStockShortfall is an order that lost reserved stock to a seller's lower count: the
	// order's workflow is told (it fails the order), and it is published like the others.
	OrderStockShortfall = "order.stock_shortfall"
	PaymentCaptured     = "payment.captured"
	PaymentRefunded     = "payment.refunded"
	StockChanged        = "stock.changed"
	CartAbandoned       = "cart.abandoned"
	// WebhookEndpointDisabled: a seller's webhook endpoint failed a delivery for a day and was
	// disabled; the seller is to be told.
	WebhookEndpointDisabled = "webhook.endpoint_disabled"
)

// Types are every event type the checkout publishes, each with a schema.
var Types = []string{OrderCreated, OrderConfirmed, OrderFailed, OrderCancelled, OrderLineCancelled,
	OrderStockShortfall, PaymentCaptured, PaymentRefunded, StockChanged, CartAbandoned, WebhookEndpointDisabled}

// SchemaVersion is the version of every type's data schema. Adding an optional field keeps it; a
// change a consumer could trip on (a field removed, renamed or retyped) is a new version, published
// beside the old one until its consumers have moved.
const SchemaVersion = 1

// DataSchema names the schema of a type's data (the envelope's dataschema).
func DataSchema(typ string) string {
	return "urn:checkout:events:" + typ + ":v" + strconv.Itoa(SchemaVersion)
}

// Source is the envelope's source: the checkout.
const Source = "/checkout"

// Row is one outbox event as stored.
type Row struct {
	ID            int64
	AggregateType string
	AggregateID   string
	Type          string
	Payload       json.RawMessage
	CreatedAt     time.Time
	// Traceparent and Tracestate are the W3C trace context of the change that wrote the event,
	// when that change was traced and sampled; empty otherwise.
	Traceparent string
	Tracestate  string
}

// Envelope is a CloudEvents 1.0 event in its structured JSON form. The id is the outbox row's (it
// never repeats, and the broker de-duplicates by it); partitionkey (the CloudEvents partitioning
// extension) is the aggregate whose events keep their order: "order/98213", "stock/77/3",
// "cart/u:7".
type Envelope struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	DataSchema      string    `json:"dataschema"`
	PartitionKey    string    `json:"partitionkey"`
	// TraceParent and TraceState (CloudEvents' distributed-tracing extension) are the W3C trace
	// context of the event's publish, when the change that wrote it was sampled; absent otherwise.
	TraceParent string          `json:"traceparent,omitempty"`
	TraceState  string          `json:"tracestate,omitempty"`
	Data        json.RawMessage `json:"data"`
}

// ErrUnknownType is an outbox row of a type this build does not publish.
var ErrUnknownType = errors.New("unknown event type")

// Build makes the envelope of an outbox row.
func Build(r Row) (Envelope, error) {
	data, err := buildData(r)
	if err != nil {
		return Envelope{}, fmt.Errorf("event %d (%s): %w", r.ID, r.Type, err)
	}
	b, err := json.Marshal(data)
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{SpecVersion: "1.0", ID: strconv.FormatInt(r.ID, 10), Source: Source, Type: r.Type,
		Subject: r.AggregateType + "/" + r.AggregateID, Time: r.CreatedAt.UTC(), DataContentType: "application/json",
		DataSchema: DataSchema(r.Type), PartitionKey: r.AggregateType + "/" + r.AggregateID, Data: b}, nil
}

// Order is the data of order.created, order.confirmed, order.failed and order.cancelled: the
// order as it stood when the event was written.
type Order struct {
	OrderID int64  `json:"orderId"`
	UserID  int64  `json:"userId"`
	Status  string `json:"status"`
	// FailureCode says why an order failed or was cancelled (PAYMENT_DECLINED, HOLD_EXPIRED, …).
	FailureCode string      `json:"failureCode,omitempty"`
	Total       string      `json:"total"`
	Currency    string      `json:"currency"`
	PlacedAt    time.Time   `json:"placedAt"`
	Items       []OrderItem `json:"items"`
}

// OrderItem is one line of an order.
type OrderItem struct {
	SKUID             int64  `json:"skuId"`
	SellerID          int64  `json:"sellerId"`
	Title             string `json:"title"`
	Quantity          int32  `json:"quantity"`
	CancelledQuantity int32  `json:"cancelledQuantity"`
	UnitPrice         string `json:"unitPrice"`
}

// LineCancelled is the data of order.line_cancelled: units of one line cancelled after payment.
type LineCancelled struct {
	OrderID  int64  `json:"orderId"`
	UserID   int64  `json:"userId"`
	SellerID int64  `json:"sellerId"`
	SKUID    int64  `json:"skuId"`
	Units    int32  `json:"units"`
	Reason   string `json:"reason"`
	Refund   string `json:"refund"`
	Currency string `json:"currency"`
	// Restocked: the units went back on the seller's shelf (seller_cannot_ship).
	Restocked     bool  `json:"restocked"`
	LineQuantity  int32 `json:"lineQuantity"`
	LineCancelled int32 `json:"lineCancelled"`
}

// StockShortfall is the data of order.stock_shortfall.
type StockShortfall struct {
	OrderID       int64 `json:"orderId"`
	SellerID      int64 `json:"sellerId"`
	SKUID         int64 `json:"skuId"`
	WarehouseID   int32 `json:"warehouseId"`
	ReleasedUnits int32 `json:"releasedUnits"`
}

// Payment is the data of payment.captured and payment.refunded: the money this event moved.
type Payment struct {
	OrderID  int64  `json:"orderId"`
	IntentID string `json:"intentId,omitempty"`
	Provider string `json:"provider"`
	// Amount is what this capture or this refund moved.
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	// RefundedTotal is every refund of the order so far (payment.refunded only).
	RefundedTotal string `json:"refundedTotal,omitempty"`
}

// Stock is the data of stock.changed: one (SKU, warehouse) row's sellable units after a change.
type Stock struct {
	SKUID       int64 `json:"skuId"`
	WarehouseID int32 `json:"warehouseId"`
	Sellable    int32 `json:"sellable"`
	OnHand      int32 `json:"onHand"`
	Reserved    int32 `json:"reserved"`
	// Cause: seller_count (a seller's count, or a new row), reserved (units held for orders),
	// released (held units given back: expiry, cancel, failure, repair), restocked (units back on
	// the shelf: a refund or a line cancellation), adjusted (anything else), removed (row deleted).
	Cause string `json:"cause"`
}

// Cart is the data of cart.abandoned: a member's non-empty cart the clean-up removed.
type Cart struct {
	CartID         string     `json:"cartId"`
	UserID         int64      `json:"userId"`
	Items          []CartItem `json:"items"`
	LastActivityAt time.Time  `json:"lastActivityAt"`
}

// CartItem is one line of an abandoned cart.
type CartItem struct {
	SKUID    int64 `json:"skuId"`
	SellerID int64 `json:"sellerId"`
	Quantity int32 `json:"quantity"`
}

// EndpointDisabled is the data of webhook.endpoint_disabled.
type EndpointDisabled struct {
	SellerID   int64  `json:"sellerId"`
	EndpointID int64  `json:"endpointId"`
	URL        string `json:"url"`
	Reason     string `json:"reason"`
}

// stored payloads, as the outbox rows hold them.
type (
	storedOrder struct {
		OrderID    int64     `json:"orderId"`
		UserID     int64     `json:"userId"`
		Status     string    `json:"status"`
		Code       string    `json:"code"`
		TotalMinor int64     `json:"totalMinor"`
		Currency   string    `json:"currency"`
		PlacedAt   time.Time `json:"placedAt"`
		Items      []struct {
			SKUID             int64  `json:"skuId"`
			SellerID          int64  `json:"sellerId"`
			Title             string `json:"title"`
			Quantity          int32  `json:"quantity"`
			CancelledQuantity int32  `json:"cancelledQuantity"`
			UnitPriceMinor    int64  `json:"unitPriceMinor"`
		} `json:"items"`
	}
	storedLineCancelled struct {
		LineCancelled
		RefundMinor int64 `json:"refundMinor"`
	}
	storedPayment struct {
		OrderID            int64  `json:"orderId"`
		IntentID           string `json:"intentId"`
		Provider           string `json:"provider"`
		CapturedMinor      int64  `json:"capturedMinor"`
		RefundedMinor      int64  `json:"refundedMinor"`
		RefundedTotalMinor int64  `json:"refundedTotalMinor"`
		Currency           string `json:"currency"`
	}
)

func buildData(r Row) (any, error) {
	switch r.Type {
	case OrderCreated, OrderConfirmed, OrderFailed, OrderCancelled:
		var s storedOrder
		if err := json.Unmarshal(r.Payload, &s); err != nil {
			return nil, err
		}
		if s.OrderID == 0 || s.Currency == "" {
			return nil, errors.New("the order's payload has no order (was the order deleted?)")
		}
		o := Order{OrderID: s.OrderID, UserID: s.UserID, Status: s.Status, FailureCode: s.Code,
			Total: money.FormatIn(s.TotalMinor, s.Currency), Currency: s.Currency, PlacedAt: s.PlacedAt.UTC(), Items: []OrderItem{}}
		for _, it := range s.Items {
			o.Items = append(o.Items, OrderItem{SKUID: it.SKUID, SellerID: it.SellerID, Title: it.Title,
				Quantity: it.Quantity, CancelledQuantity: it.CancelledQuantity, UnitPrice: money.FormatIn(it.UnitPriceMinor, s.Currency)})
		}
		return o, nil
	case OrderLineCancelled:
		var s storedLineCancelled
		if err := json.Unmarshal(r.Payload, &s); err != nil {
			return nil, err
		}
		d := s.LineCancelled
		if d.Refund == "" {
			d.Refund = money.FormatIn(s.RefundMinor, d.Currency)
		}
		return d, nil
	case OrderStockShortfall:
		var d StockShortfall
		err := json.Unmarshal(r.Payload, &d)
		return d, err
	case PaymentCaptured, PaymentRefunded:
		var s storedPayment
		if err := json.Unmarshal(r.Payload, &s); err != nil {
			return nil, err
		}
		p := Payment{OrderID: s.OrderID, IntentID: s.IntentID, Provider: s.Provider, Currency: s.Currency,
			Amount: money.FormatIn(s.CapturedMinor, s.Currency)}
		if r.Type == PaymentRefunded {
			p.Amount, p.RefundedTotal = money.FormatIn(s.RefundedMinor, s.Currency), money.FormatIn(s.RefundedTotalMinor, s.Currency)
		}
		return p, nil
	case StockChanged:
		var d Stock
		err := json.Unmarshal(r.Payload, &d)
		return d, err
	case WebhookEndpointDisabled:
		var d EndpointDisabled
		err := json.Unmarshal(r.Payload, &d)
		return d, err
	case CartAbandoned:
		var d Cart
		if err := json.Unmarshal(r.Payload, &d); err != nil {
			return nil, err
		}
		if d.Items == nil {
			d.Items = []CartItem{}
		}
		d.LastActivityAt = d.LastActivityAt.UTC()
		return d, nil
	}
	return nil, ErrUnknownType
}
