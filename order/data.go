package order

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlc-dev/pqtype"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/order/internal/orderstore"
)

// Data is the order area's tables (orders, their items, timeline, payments, line cancellations,
// staff actions, addresses, kept answers) on a pool or in the caller's transaction: the API, the
// activities, the worker and the harness read and write them through it, never through the
// store. Each method runs the statement of the same name of order/internal/orderstore/queries;
// absence is an error db.NotFound recognises. The types below carry the fields of the statements'
// rows and are converted from them, so the compiler keeps the two in step.
type Data struct{ q *orderstore.Queries }

// DataOf is the order's data on conn, a pool or a transaction.
func DataOf(conn db.DBTX) Data { return Data{q: orderstore.New(conn)} }

// PaymentByKey is PaymentByIntent by the payment's idempotency key.
func (d Data) PaymentByKey(ctx context.Context, key string) (PaymentOfIntent, error) {
	r, err := d.q.PaymentByKey(ctx, key)
	return PaymentOfIntent(r), err
}

// ErrAddressBookFull: the shopper's address book holds the most addresses it may.
var ErrAddressBookFull = errors.New("address book is full")

// CreateAddress adds an address to the user's book while it holds fewer than max (0: no limit):
// the count and the insert are one decision under the user's lock. Its id and when it was made.
func CreateAddress(ctx context.Context, pool *pgxpool.Pool, a Address, max int32) (Address, error) {
	// BEGIN and the lock go with the insert, in one round trip (db.InTx).
	err := db.InTx(ctx, pool, func(tx db.DBTX) error {
		if err := db.LockUser(ctx, tx, db.LockAddressBook, a.UserID); err != nil {
			return err
		}
		row, err := orderstore.New(tx).CreateAddress(ctx, orderstore.CreateAddressParams{UserID: a.UserID, City: a.City,
			Line1: a.Line1, Lat: a.Lat, Lon: a.Lon, MaxAddresses: max})
		a.ID, a.CreatedAt = row.ID, row.CreatedAt
		return err
	})
	if db.NotFound(err) {
		return a, ErrAddressBookFull
	}
	return a, err
}

// Order is an order as stored.
type Order struct {
	ID             int64
	UserID         int64
	IdempotencyKey string
	RequestHash    string
	WorkflowID     string
	Status         string
	AddressID      int64
	PriceVersion   string
	TotalMinor     int64
	Currency       string
	HoldExpiresAt  *time.Time
	FailureCode    *string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	Attention      pqtype.NullRawMessage
	RunID          string
	HoldExtensions int32
}

// Payment is an order's payment as the saga mirrors the provider's answers into it.
type Payment struct {
	OrderID              int64
	IdempotencyKey       string
	Provider             string
	IntentID             *string
	Status               string
	AmountMinor          int64
	Currency             string
	RedirectUrl          *string
	CapturedMinor        int64
	RefundedMinor        int64
	CreatedAt            time.Time
	UpdatedAt            time.Time
	NothingHeldAt        *time.Time
	AuthorizeAttemptedAt *time.Time
	CaptureBefore        *time.Time
}

// LineCancellation is units of a line cancelled after payment, with their refund.
type LineCancellation struct {
	ID          int64
	OrderID     int64
	RequestID   string
	SkuID       int64
	Units       int32
	Reason      string
	RequestedBy string
	AmountMinor int64
	Currency    string
	Allocations json.RawMessage
	RefundedAt  *time.Time
	RestockedAt *time.Time
	AnnouncedAt *time.Time
	Attention   pqtype.NullRawMessage
	CreatedAt   time.Time
	UpdatedAt   time.Time
	WorkflowID  *string
}

// Address is one of a shopper's addresses.
type Address struct {
	ID        int64
	UserID    int64
	City      string
	Line1     string
	Lat       float64
	Lon       float64
	CreatedAt time.Time
}

// IdempotencyRecord is the answer kept under a (user, Idempotency-Key).
type IdempotencyRecord struct {
	UserID         int64
	IdempotencyKey string
	RequestHash    string
	OrderID        *int64
	Outcome        json.RawMessage
	CreatedAt      time.Time
}

// Item is one line of an order, priced as it was ordered.
type Item struct {
	SkuID             int64
	SellerID          int64
	Title             string
	Quantity          int32
	UnitPriceMinor    int64
	Currency          string
	ListPriceMinor    *int64
	CampaignIds       []int64
	CancelledQuantity int32
}

// Summary is an order as its shopper's list shows it.
type Summary struct {
	ID          int64
	Status      string
	TotalMinor  int64
	Currency    string
	FailureCode *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// PaymentOfIntent is the order and payment a provider's intent belongs to.
type PaymentOfIntent struct {
	OrderID    int64
	WorkflowID string
	UserID     int64
	Status     string
}

// Line is an order's status with one of its lines (nil quantities: the order has no such line).
type Line struct {
	Status            string
	Quantity          *int32
	CancelledQuantity *int32
}

// PaymentToReconcile is a payment the reconciler looks at.
type PaymentToReconcile struct {
	OrderID     int64
	OrderStatus string
	FailureCode string
	Status      string
	WorkflowID  string
}

// PaymentsToReconcileQuery selects the reconciler's next batch of payments.
type PaymentsToReconcileQuery struct {
	AfterOrderID       int64
	OrderID            int64
	PendingSeconds     float64
	OrphanAfterSeconds float64
	LateSeconds        float64
	BatchSize          int32
}

// LineCancellationToFinish is a line cancellation whose workflow may be gone before it finished.
type LineCancellationToFinish struct {
	ID         int64
	OrderID    int64
	RequestID  string
	WorkflowID string
}

// ShipTo is where an order's address is.
type ShipTo struct {
	Lat float64
	Lon float64
}

// HoldExtension asks for an order's hold to be extended, within its limits.
type HoldExtension struct {
	BySeconds     float64
	OrderID       int64
	MaxExtensions int32
	WindowSeconds float64
}

// ExtendedHold is a hold after its extension.
type ExtendedHold struct {
	HoldExpiresAt  time.Time
	HoldExtensions int32
	Moved          int64
}

// HoldState is what decides whether a hold may be extended.
type HoldState struct {
	Status         string
	HoldExpiresAt  *time.Time
	HoldExtensions int32
	Now            time.Time
	Lapsed         bool
}

// PaymentRef names an order's payment at the provider.
type PaymentRef struct {
	IdempotencyKey      string
	IntentID            string
	PriceVersion        string
	CaptureBefore       *time.Time
	AttemptedSecondsAgo float64
}

// CancelledUnits is a line after units were taken off it.
type CancelledUnits struct {
	Quantity          int32
	CancelledQuantity int32
}

// Announcement is a refunded line cancellation, announced once.
type Announcement struct {
	OrderID           int64
	SkuID             int64
	Units             int32
	Reason            string
	AmountMinor       int64
	Currency          string
	Restocked         bool
	SellerID          int64
	UserID            int64
	Quantity          int32
	CancelledQuantity int32
}

// WaitingByStatus counts the orders waiting in one status, for the gauges.
type WaitingByStatus struct {
	Status          string
	Orders          int64
	Escalated       int64
	OldestSeconds   float64
	PastHoldSeconds float64
}

// UnknownPayments counts the payments whose outcome is unknown, for the gauges.
type UnknownPayments struct {
	Payments      int64
	OldestSeconds float64
}

// NewLineCancellation is a line cancellation as requested.
type NewLineCancellation struct {
	RequestID   string
	Reason      string
	RequestedBy string
	WorkflowID  *string
	OrderID     int64
	SkuID       int64
	Units       int32
}

// WebhookEventClaim claims a payment provider's event for acting on it once.
type WebhookEventClaim struct {
	EventID      string
	IntentID     string
	Type         string
	ClaimSeconds float64
}

// PaymentUpdate mirrors the provider's intent into an order's payment.
type PaymentUpdate struct {
	IntentID      *string
	Status        string
	RedirectUrl   *string
	CaptureBefore *time.Time
	CapturedMinor int64
	RefundedMinor int64
	OrderID       int64
}

// PaymentMethod is a request's payment method token, kept for its Authorize step.
type PaymentMethod struct {
	AddressID      int64
	UserID         int64
	IdempotencyKey string
	RequestHash    string
	Token          string
}

// TimelineEntry is one entry of an order's timeline.
type TimelineEntry struct {
	Kind      string
	Detail    pqtype.NullRawMessage
	CreatedAt time.Time
}

// StaffActionEntry is one staff action on an order, with the person who sent it.
type StaffActionEntry struct {
	ID                 int64
	CreatedAt          time.Time
	OrderID            int64
	LineCancellationID *int64
	Action             string
	Reason             string
	Step               *string
	ActorSub           string
	ActorRole          string
	ActorName          string
	ActorVia           string
	ActorIp            string
	Detail             json.RawMessage
	WorkflowID         string
}

// GetOrder runs the order store's GetOrder (its queries/*.sql say what it does).
func (d Data) GetOrder(ctx context.Context, id int64) (Order, error) {
	r, err := d.q.GetOrder(ctx, id)
	return Order(r), err
}

// GetPayment runs the order store's GetPayment (its queries/*.sql say what it does).
func (d Data) GetPayment(ctx context.Context, orderID int64) (Payment, error) {
	r, err := d.q.GetPayment(ctx, orderID)
	return Payment(r), err
}

// GetIdempotencyRecord runs the order store's GetIdempotencyRecord (its queries/*.sql say what it does).
func (d Data) GetIdempotencyRecord(ctx context.Context, userID int64, idempotencyKey string) (IdempotencyRecord, error) {
	r, err := d.q.GetIdempotencyRecord(ctx, userID, idempotencyKey)
	return IdempotencyRecord(r), err
}

// ListOrdersOfUser runs the order store's ListOrdersOfUser (its queries/*.sql say what it does).
func (d Data) ListOrdersOfUser(ctx context.Context, userID int64, beforeID int64, pageSize int32) ([]Summary, error) {
	rows, err := d.q.ListOrdersOfUser(ctx, userID, beforeID, pageSize)
	out := make([]Summary, len(rows))
	for i, r := range rows {
		out[i] = Summary(r)
	}
	return out, err
}

// ListAddresses runs the order store's ListAddresses (its queries/*.sql say what it does).
func (d Data) ListAddresses(ctx context.Context, userID int64) ([]Address, error) {
	rows, err := d.q.ListAddresses(ctx, userID)
	out := make([]Address, len(rows))
	for i, r := range rows {
		out[i] = Address(r)
	}
	return out, err
}

// GetAddress runs the order store's GetAddress (its queries/*.sql say what it does).
func (d Data) GetAddress(ctx context.Context, id int64, userID int64) (Address, error) {
	r, err := d.q.GetAddress(ctx, id, userID)
	return Address(r), err
}

// ClaimWebhookEvent runs the order store's ClaimWebhookEvent (its queries/*.sql say what it does).
func (d Data) ClaimWebhookEvent(ctx context.Context, arg WebhookEventClaim) (time.Time, error) {
	return d.q.ClaimWebhookEvent(ctx, orderstore.ClaimWebhookEventParams(arg))
}

// WebhookEventActedOn runs the order store's WebhookEventActedOn (its queries/*.sql say what it does).
func (d Data) WebhookEventActedOn(ctx context.Context, eventID string) (bool, error) {
	return d.q.WebhookEventActedOn(ctx, eventID)
}

// ReleaseWebhookEvent runs the order store's ReleaseWebhookEvent (its queries/*.sql say what it does).
func (d Data) ReleaseWebhookEvent(ctx context.Context, eventID string, claimedUntil time.Time) error {
	return d.q.ReleaseWebhookEvent(ctx, eventID, claimedUntil)
}

// WebhookEventDone runs the order store's WebhookEventDone (its queries/*.sql say what it does).
func (d Data) WebhookEventDone(ctx context.Context, eventID string, claimedUntil time.Time) error {
	return d.q.WebhookEventDone(ctx, eventID, claimedUntil)
}

// PaymentByIntent runs the order store's PaymentByIntent (its queries/*.sql say what it does).
func (d Data) PaymentByIntent(ctx context.Context, intentID *string) (PaymentOfIntent, error) {
	r, err := d.q.PaymentByIntent(ctx, intentID)
	return PaymentOfIntent(r), err
}

// RecordPayment runs the order store's RecordPayment (its queries/*.sql say what it does).
func (d Data) RecordPayment(ctx context.Context, arg PaymentUpdate) error {
	return d.q.RecordPayment(ctx, orderstore.RecordPaymentParams(arg))
}

// LineCancellationByRequest runs the order store's LineCancellationByRequest (its queries/*.sql say what it does).
func (d Data) LineCancellationByRequest(ctx context.Context, orderID int64, requestID string) (LineCancellation, error) {
	r, err := d.q.LineCancellationByRequest(ctx, orderID, requestID)
	return LineCancellation(r), err
}

// LineOfOrder runs the order store's LineOfOrder (its queries/*.sql say what it does).
func (d Data) LineOfOrder(ctx context.Context, skuID int64, orderID int64) (Line, error) {
	r, err := d.q.LineOfOrder(ctx, skuID, orderID)
	return Line(r), err
}

// OrderItems runs the order store's OrderItems (its queries/*.sql say what it does).
func (d Data) OrderItems(ctx context.Context, orderID int64) ([]Item, error) {
	rows, err := d.q.OrderItems(ctx, orderID)
	out := make([]Item, len(rows))
	for i, r := range rows {
		out[i] = Item(r)
	}
	return out, err
}

// LineCancellationsOfOrder runs the order store's LineCancellationsOfOrder (its queries/*.sql say what it does).
func (d Data) LineCancellationsOfOrder(ctx context.Context, orderID int64) ([]LineCancellation, error) {
	rows, err := d.q.LineCancellationsOfOrder(ctx, orderID)
	out := make([]LineCancellation, len(rows))
	for i, r := range rows {
		out[i] = LineCancellation(r)
	}
	return out, err
}

// SavePaymentMethodToken runs the order store's SavePaymentMethodToken (its queries/*.sql say what it does).
func (d Data) SavePaymentMethodToken(ctx context.Context, arg PaymentMethod) (bool, error) {
	return d.q.SavePaymentMethodToken(ctx, orderstore.SavePaymentMethodTokenParams(arg))
}

// OrderShipTo runs the order store's OrderShipTo (its queries/*.sql say what it does).
func (d Data) OrderShipTo(ctx context.Context, orderID int64) (ShipTo, error) {
	r, err := d.q.OrderShipTo(ctx, orderID)
	return ShipTo(r), err
}

// PaymentsToReconcile runs the order store's PaymentsToReconcile (its queries/*.sql say what it does).
func (d Data) PaymentsToReconcile(ctx context.Context, arg PaymentsToReconcileQuery) ([]PaymentToReconcile, error) {
	rows, err := d.q.PaymentsToReconcile(ctx, orderstore.PaymentsToReconcileParams(arg))
	out := make([]PaymentToReconcile, len(rows))
	for i, r := range rows {
		out[i] = PaymentToReconcile(r)
	}
	return out, err
}

// ForgetStalePaymentMethodTokens runs the order store's ForgetStalePaymentMethodTokens (its queries/*.sql say what it does).
func (d Data) ForgetStalePaymentMethodTokens(ctx context.Context, olderThanSeconds float64) (int64, error) {
	return d.q.ForgetStalePaymentMethodTokens(ctx, olderThanSeconds)
}

// SettleNothingHeld runs the order store's SettleNothingHeld (its queries/*.sql say what it does).
func (d Data) SettleNothingHeld(ctx context.Context, orderID int64, settleSeconds float64) (int64, error) {
	return d.q.SettleNothingHeld(ctx, orderID, settleSeconds)
}

// LineCancellationsToFinish runs the order store's LineCancellationsToFinish (its queries/*.sql say what it does).
func (d Data) LineCancellationsToFinish(ctx context.Context, afterID int64, olderThanSeconds float64, batchSize int32) ([]LineCancellationToFinish, error) {
	rows, err := d.q.LineCancellationsToFinish(ctx, afterID, olderThanSeconds, batchSize)
	out := make([]LineCancellationToFinish, len(rows))
	for i, r := range rows {
		out[i] = LineCancellationToFinish(r)
	}
	return out, err
}

// ExtendOrderHold runs the order store's ExtendOrderHold (its queries/*.sql say what it does).
func (d Data) ExtendOrderHold(ctx context.Context, arg HoldExtension) (ExtendedHold, error) {
	r, err := d.q.ExtendOrderHold(ctx, orderstore.ExtendOrderHoldParams(arg))
	return ExtendedHold(r), err
}

// OrderHoldState runs the order store's OrderHoldState (its queries/*.sql say what it does).
func (d Data) OrderHoldState(ctx context.Context, orderID int64) (HoldState, error) {
	r, err := d.q.OrderHoldState(ctx, orderID)
	return HoldState(r), err
}

// PaymentRef runs the order store's PaymentRef (its queries/*.sql say what it does).
func (d Data) PaymentRef(ctx context.Context, orderID int64) (PaymentRef, error) {
	r, err := d.q.PaymentRef(ctx, orderID)
	return PaymentRef(r), err
}

// PaymentToAuthorize reads, in one round trip, what an authorization needs: the order's payment as
// PaymentRef reads it, and its payment method token as PaymentMethodToken does; kept is false when
// the token is no longer on record. An order without a payment row is an error db.NotFound
// recognises.
func PaymentToAuthorize(ctx context.Context, conn db.Batcher, orderID int64) (ref PaymentRef, token string, kept bool, err error) {
	b := &pgx.Batch{}
	args := []any{orderID}
	found := false
	db.QueueRow(b, orderstore.PaymentRefSQL, args, func(r orderstore.PaymentRefRow, ok bool) { ref, found = PaymentRef(r), ok })
	db.QueueRow(b, orderstore.PaymentMethodTokenSQL, args, func(r tokenRow, ok bool) { token, kept = r.Token, ok })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return PaymentRef{}, "", false, err
	}
	if !found {
		return PaymentRef{}, "", false, pgx.ErrNoRows
	}
	return ref, token, kept, nil
}

// tokenRow is PaymentMethodToken's row.
type tokenRow struct{ Token string }

// AuthorizeAttempted runs the order store's AuthorizeAttempted (its queries/*.sql say what it does).
func (d Data) AuthorizeAttempted(ctx context.Context, orderID int64) error {
	return d.q.AuthorizeAttempted(ctx, orderID)
}

// RecordIntentID runs the order store's RecordIntentID (its queries/*.sql say what it does).
func (d Data) RecordIntentID(ctx context.Context, intentID *string, orderID int64) error {
	return d.q.RecordIntentID(ctx, intentID, orderID)
}

// LockOrder runs the order store's LockOrder (its queries/*.sql say what it does).
func (d Data) LockOrder(ctx context.Context, id int64) error {
	return d.q.LockOrder(ctx, id)
}

// InsertLineCancellation runs the order store's InsertLineCancellation (its queries/*.sql say what it does).
func (d Data) InsertLineCancellation(ctx context.Context, arg NewLineCancellation) (int64, error) {
	return d.q.InsertLineCancellation(ctx, orderstore.InsertLineCancellationParams(arg))
}

// SetLineCancellationWorkflow runs the order store's SetLineCancellationWorkflow (its queries/*.sql say what it does).
func (d Data) SetLineCancellationWorkflow(ctx context.Context, workflowID string, id int64) error {
	return d.q.SetLineCancellationWorkflow(ctx, workflowID, id)
}

// CancelLineUnits runs the order store's CancelLineUnits (its queries/*.sql say what it does).
func (d Data) CancelLineUnits(ctx context.Context, units int32, orderID int64, skuID int64) (CancelledUnits, error) {
	r, err := d.q.CancelLineUnits(ctx, units, orderID, skuID)
	return CancelledUnits(r), err
}

// SetLineCancellationAllocations runs the order store's SetLineCancellationAllocations (its queries/*.sql say what it does).
func (d Data) SetLineCancellationAllocations(ctx context.Context, allocations json.RawMessage, id int64) error {
	return d.q.SetLineCancellationAllocations(ctx, allocations, id)
}

// GetLineCancellation runs the order store's GetLineCancellation (its queries/*.sql say what it does).
func (d Data) GetLineCancellation(ctx context.Context, id int64) (LineCancellation, error) {
	r, err := d.q.GetLineCancellation(ctx, id)
	return LineCancellation(r), err
}

// MarkLineCancellationRefunded runs the order store's MarkLineCancellationRefunded (its queries/*.sql say what it does).
func (d Data) MarkLineCancellationRefunded(ctx context.Context, id int64) (int64, error) {
	return d.q.MarkLineCancellationRefunded(ctx, id)
}

// AnnounceLineCancellation runs the order store's AnnounceLineCancellation (its queries/*.sql say what it does).
func (d Data) AnnounceLineCancellation(ctx context.Context, id int64) (Announcement, error) {
	r, err := d.q.AnnounceLineCancellation(ctx, id)
	return Announcement(r), err
}

// SetLineCancellationAttention runs the order store's SetLineCancellationAttention (its queries/*.sql say what it does).
func (d Data) SetLineCancellationAttention(ctx context.Context, attention pqtype.NullRawMessage, id int64) error {
	return d.q.SetLineCancellationAttention(ctx, attention, id)
}

// WaitingOrders runs the order store's WaitingOrders (its queries/*.sql say what it does).
func (d Data) WaitingOrders(ctx context.Context) ([]WaitingByStatus, error) {
	rows, err := d.q.WaitingOrders(ctx)
	out := make([]WaitingByStatus, len(rows))
	for i, r := range rows {
		out[i] = WaitingByStatus(r)
	}
	return out, err
}

// UnknownPayments runs the order store's UnknownPayments (its queries/*.sql say what it does).
func (d Data) UnknownPayments(ctx context.Context) (UnknownPayments, error) {
	r, err := d.q.UnknownPayments(ctx)
	return UnknownPayments(r), err
}

// Note appends an entry to the order's timeline (Note, in d's transaction).
func (d Data) Note(ctx context.Context, orderID int64, kind string, detail map[string]any) error {
	return note(ctx, d.q, orderID, kind, detail)
}

// RecordStaffAction writes the action's staff_actions row (RecordStaffAction, in d's transaction).
func (d Data) RecordStaffAction(ctx context.Context, a StaffAction) (bool, error) {
	return recordStaffAction(ctx, d.q, a)
}

// OrderWorkflowID is the workflow of the order id (for the handlers of events that name the
// order only).
func (d Data) OrderWorkflowID(ctx context.Context, id int64) (string, error) {
	return d.q.OrderWorkflowID(ctx, id)
}
