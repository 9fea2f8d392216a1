// Package workflows holds the order saga and its hold-expiry child: the order of the steps, their
// compensations, and what support staff see and send in the Temporal UI. The steps themselves are
// activities (package activities); names shared with the API and the worker are here.
package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"

	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/internal/problem"
)

// BuildID names this build's workflow code as a worker deployment version. Workers run every
// workflow pinned to the build that started it, so a change to workflow code that older runs could
// not replay needs a new BuildID (and histories recorded for it: make histories).
const BuildID = "saga-8"

// RetiredBuilds are builds whose code is gone: the unversioned releases v1 and v2, whose sagas the
// first versioned builds carried for their runs. Their recorded histories are kept (the manifest
// marks them retired) but no longer replayed. A run of one found open is an incident: no worker can
// run it any more.
var RetiredBuilds = []string{"v1", "v2"}

// Workflow, update, signal and query names.
const (
	OrderWorkflowName = "OrderWorkflow"
	HoldWorkflowName  = "HoldWorkflow"
	// LineCancelWorkflowName cancels units of a confirmed order's line (support starts it from
	// the UI, ops through the API).
	LineCancelWorkflowName = "LineCancelWorkflow"

	// UpdatePlaceOrder returns the answer to POST /orders once reserve and authorize are done.
	UpdatePlaceOrder = "place-order"
	// UpdateCancel is the shopper's cancel; refused once the order is confirmed.
	UpdateCancel = "cancel"
	// UpdateExtendHold is the shopper's extension of the order's hold while it waits for payment;
	// refused (HoldNotExtendable, with the reason) unless the order will act on it.
	UpdateExtendHold = "extend-hold"
	// SupportAction is what support staff send from the UI (as signal or update):
	// {"action": "retry" | "cancel" | "refund", "reason": "..."}.
	SupportAction = "support-action"

	SignalPaymentResult  = "payment-result"
	SignalStockShortfall = "stock-shortfall"

	// SignalHoldExtend moves the hold child's expiry (HoldExtend) after the shopper extended it.
	SignalHoldExtend = "extend"

	QueryStatus = "status"
)

// Outcome is how placing an order ended: what POST /orders answers (the API maps it to HTTP,
// api/orders.go's renderOutcome). An outcome that refuses the order is the code it is answered
// with; REJECTED carries its code beside it (PlaceOrderResult.RejectCode).
type Outcome string

// Outcomes of placing an order.
const (
	OutcomeCreated            Outcome = "CREATED"
	OutcomePriceChanged               = Outcome(problem.PriceChanged)
	OutcomeOutOfStock                 = Outcome(problem.OutOfStock)
	OutcomePaymentDeclined            = Outcome(problem.PaymentDeclined)
	OutcomePaymentUnavailable         = Outcome(problem.PaymentUnavailable)
	OutcomeRejected           Outcome = "REJECTED"
	OutcomeUnavailable                = Outcome(problem.Unavailable)
	// OutcomeReplay: an earlier run answered this request; the answer is recorded under the key.
	OutcomeReplay Outcome = "REPLAY"
)

// The handlers refuse with codes: a place-order with another request's body under its key
// (IDEMPOTENCY_KEY_REUSED), a cancel too late (ORDER_NOT_CANCELLABLE), an extension of the hold
// (HoldRefusal's reason), and a support action the order will not act on (INVALID_SUPPORT_ACTION,
// which support reads in the UI; releases before the codes named it InvalidSupportAction). An order
// refused by the open-order cap (TOO_MANY_OPEN_ORDERS), unlike the other refusals, is never recorded
// under the key, nor is "try again" (UNAVAILABLE before any order row): once the shopper pays or
// cancels another order, or the database is back, the same request may be sent again and placed
// (the API places it under an update id of its own, since the server keeps a closed run's answer
// to the first).

// Search attributes support staff filter on in the UI; registered by the worker at start-up. No
// codec encrypts search attributes (the server indexes them), so they hold ids, statuses and flags
// only: never a name, an address, a token or a URL.
var (
	AttrOrderID        = temporal.NewSearchAttributeKeyInt64("OrderId")
	AttrCustomerID     = temporal.NewSearchAttributeKeyInt64("CustomerId")
	AttrOrderStatus    = temporal.NewSearchAttributeKeyKeyword("OrderStatus")
	AttrPaymentStatus  = temporal.NewSearchAttributeKeyKeyword("PaymentStatus")
	AttrNeedsAttention = temporal.NewSearchAttributeKeyBool("NeedsAttention")
	// AttrEscalated: the order has waited for support past the worker's PARKED_ESCALATE_AFTER; it
	// is given up at its attention's givesUpAt unless support acts.
	AttrEscalated = temporal.NewSearchAttributeKeyBool("Escalated")
)

var readableKey = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// OrderWorkflowID is the workflow of one (user, Idempotency-Key): the same key always names the
// same workflow, so duplicates attach to one run. Readable keys stay readable in the UI; others
// are hashed, behind a "~" that no readable key contains, so the two forms never collide.
func OrderWorkflowID(userID int64, idempotencyKey string) string {
	return keyedID("order-u"+strconv.FormatInt(userID, 10)+"-", idempotencyKey)
}

// keyedID is prefix and a client's key: the key itself when readable, else its hash behind "~".
func keyedID(prefix, key string) string {
	if readableKey.MatchString(key) {
		return prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return prefix + "~" + hex.EncodeToString(sum[:12])
}

// LineCancelWorkflowID is the line cancellation of one (order, request id): a repeated request
// names the same workflow. Request ids follow the rule of Idempotency-Keys in OrderWorkflowID.
func LineCancelWorkflowID(orderID int64, requestID string) string {
	return keyedID("line-cancel-"+strconv.FormatInt(orderID, 10)+"-", requestID)
}

// LatePaymentWorkflowID is the payment reconciler's run for one closed order whose payment arrived
// late.
func LatePaymentWorkflowID(orderID int64) string {
	return "payment-reconciler-order-" + strconv.FormatInt(orderID, 10)
}

// HoldWorkflowID is the hold-expiry child of an order.
func HoldWorkflowID(orderID int64) string { return "hold-" + strconv.FormatInt(orderID, 10) }

// Scheduled jobs (ops). Each is a Temporal Schedule the worker creates or updates at start-up; the
// schedule id is also the base of its runs' workflow ids (the server appends the run's time) and
// the job label of its metrics.
const (
	ScheduleSweeper           = "reservation-sweeper"
	ScheduleReconciler        = "inventory-reconciler"
	ScheduleCartJanitor       = "cart-janitor"
	SchedulePaymentReconciler = "payment-reconciler"

	SweeperWorkflowName           = "SweeperWorkflow"
	ReconcilerWorkflowName        = "ReconcilerWorkflow"
	CartJanitorWorkflowName       = "CartJanitorWorkflow"
	PaymentReconcilerWorkflowName = "PaymentReconcilerWorkflow"
)
