package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
	"github.com/marketplace/checkout/workflows/sagav1"
	"github.com/marketplace/checkout/workflows/sagav2"
)

// OrderInput is one POST /orders: who, with which Idempotency-Key, and what they confirmed.
type OrderInput struct {
	UserID             int64         `json:"userId"`
	IdempotencyKey     string        `json:"idempotencyKey"`
	RequestHash        string        `json:"requestHash"`
	PriceVersion       string        `json:"priceVersion"`
	AddressID          int64         `json:"addressId"`
	PaymentMethodToken string        `json:"paymentMethodToken"`
	HoldTTL            time.Duration `json:"holdTtl"`
	Provider           string        `json:"provider"`
	// StepRetryWindow bounds the retries of each step after the answer; when it runs out the
	// order waits for support. Zero means the default (2 minutes).
	StepRetryWindow time.Duration `json:"stepRetryWindow,omitempty"`
}

// PlaceOrderResult is the outcome of placing the order, as soon as reserve and authorize are
// done; the API renders it (and renders the same one for every repeat of the key).
type PlaceOrderResult struct {
	Outcome       string                `json:"outcome"`
	OrderID       int64                 `json:"orderId,omitempty"`
	Status        string                `json:"status,omitempty"`
	Payment       *PaymentView          `json:"payment,omitempty"`
	HoldExpiresAt *time.Time            `json:"holdExpiresAt,omitempty"`
	Short         []inventory.ShortLine `json:"short,omitempty"`
	PriceVersion  string                `json:"priceVersion,omitempty"`
	RejectCode    string                `json:"rejectCode,omitempty"`
	Message       string                `json:"message,omitempty"`
}

// PaymentView is the payment as the shopper sees it.
type PaymentView struct {
	Status      string `json:"status"`
	RedirectURL string `json:"redirectUrl,omitempty"`
}

// PaymentSignal is the provider's word on the payment: from its signed webhook, or from the
// payment reconciler that asked it.
type PaymentSignal struct {
	EventID  string `json:"eventId"`
	IntentID string `json:"intentId"`
	Status   string `json:"status"`
	// Source says who learnt it ("webhook" when empty).
	Source string `json:"source,omitempty"`
}

// ShortfallSignal says a seller's lower count took some of the order's reserved stock.
type ShortfallSignal struct {
	SKUID       int64 `json:"skuId"`
	WarehouseID int32 `json:"warehouseId"`
}

// SupportRequest is what support staff send from the Temporal UI.
type SupportRequest struct {
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// Support actions.
const (
	ActionRetry  = "retry"
	ActionCancel = "cancel"
	ActionRefund = "refund"
)

// CancelResult answers the shopper's cancel.
type CancelResult struct {
	Status string `json:"status"`
}

// Attention is why an order waits for support.
type Attention struct {
	Step  string    `json:"step"`
	Error string    `json:"error"`
	Since time.Time `json:"since"`
}

// TimelineEntry is one thing that happened to the order.
type TimelineEntry struct {
	At     time.Time `json:"at"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
}

// OrderState is what the `status` query answers and the UI's details show.
type OrderState struct {
	OrderID        int64                  `json:"orderId"`
	CustomerID     int64                  `json:"customerId"`
	Status         string                 `json:"status"`
	FailureCode    string                 `json:"failureCode,omitempty"`
	PaymentStatus  string                 `json:"paymentStatus"`
	IntentID       string                 `json:"intentId,omitempty"`
	RedirectURL    string                 `json:"redirectUrl,omitempty"`
	Items          []pricing.Item         `json:"items,omitempty"`
	TotalMinor     int64                  `json:"totalMinor"`
	Currency       string                 `json:"currency,omitempty"`
	Allocations    []inventory.Allocation `json:"allocations,omitempty"`
	HoldExpiresAt  *time.Time             `json:"holdExpiresAt,omitempty"`
	NeedsAttention bool                   `json:"needsAttention"`
	Attention      *Attention             `json:"attention,omitempty"`
	Timeline       []TimelineEntry        `json:"timeline"`
}

// sagaChange is the change id of the saga's generations. Histories without its marker were
// recorded by the first release (package sagav1); version 1 is the second release (package
// sagav2), whose marker this id already was.
const sagaChange = "lazy-hold-child-and-attributes"

// OrderWorkflow is the checkout saga of one order. Runs begun by an earlier release replay on the
// code of that release, chosen by the saga version marker of their history.
func OrderWorkflow(ctx workflow.Context, in OrderInput) (OrderState, error) {
	if workflow.GetVersion(ctx, sagaChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		st, err := sagav1.OrderWorkflow(ctx, convert[sagav1.OrderInput](in))
		return convert[OrderState](st), err
	}
	st, err := sagav2.OrderWorkflow(ctx, convert[sagav2.OrderInput](in))
	return convert[OrderState](st), err
}

// convert copies a value into a type of the same JSON shape (the frozen sagas keep types of their
// own). JSON encoding is deterministic, so this is safe in workflow code.
func convert[T any](v any) T {
	var out T
	raw, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil {
		panic(fmt.Sprintf("%T does not convert to %T: %v", v, out, err))
	}
	return out
}

// ParkRetryEvery is how long a parked step waits for support before it tries again by itself.
const ParkRetryEvery = 5 * time.Minute

// DefaultStepRetryWindow is how long a step after the answer retries before support is asked.
const DefaultStepRetryWindow = 2 * time.Minute

// Activity references: methods on nil receivers name the registered activities.
var stockA *activities.Inventory

func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}
