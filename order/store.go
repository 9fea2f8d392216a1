package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlc-dev/pqtype"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order/internal/orderstore"
	"github.com/marketplace/checkout/outbox/emit"
	"github.com/marketplace/checkout/pricing"
)

// Store writes and reads orders. Every move is a conditional statement whose row count decides, so
// a repeated or racing call changes an order once.
type Store struct {
	Pool *pgxpool.Pool
}

func (s Store) q() *orderstore.Queries { return orderstore.New(db.Traced(s.Pool)) }

// Outbox event types of an order: its creation and its end (docs/events.md).
const (
	EventCreated   = "order.created"
	EventConfirmed = "order.confirmed"
	EventFailed    = "order.failed"
	EventCancelled = "order.cancelled"
)

// events are the outbox event of each final status.
var events = map[Status]string{StatusConfirmed: EventConfirmed, StatusFailed: EventFailed, StatusCancelled: EventCancelled}

// PaymentKey is the provider idempotency key of an order's payment. It comes from the order, not
// from the workflow run, so a reset or a retried run never charges twice.
func PaymentKey(orderID int64) string { return "order-" + strconv.FormatInt(orderID, 10) }

// New is an order to write: who asks, under which Idempotency-Key, and what they confirmed.
type New struct {
	UserID         int64
	IdempotencyKey string
	RequestHash    string
	WorkflowID     string
	RunID          string
	AddressID      int64
	Quote          pricing.Quote
	// Provider is the payment provider of the order's payment row (Create).
	Provider string
	// MaxOpen caps the shopper's orders waiting for payment (PENDING_PAYMENT); 0: no cap.
	MaxOpen int
}

// Created is the order of a request: made now, or found under the request's key.
type Created struct {
	ID     int64
	Status Status
	// Existing: the order is finished, whichever run of the request made it; that run answered
	// it, and this one must not act on it again.
	Existing bool
	// Made: this call wrote the order (otherwise the request's key already held it).
	Made bool
}

// Refusals of Create; nothing was written.
var (
	ErrAddressNotFound = errors.New("unknown address")
	ErrKeyReused       = errors.New("this Idempotency-Key was used with a different request")
)

// Waiting are a shopper's orders waiting for payment.
type Waiting struct {
	Pending int64
	// NextHoldEnd is when the first of them ends by itself if nobody pays it (nil while none has
	// its hold recorded yet).
	NextHoldEnd *time.Time
}

// TooManyOpenError refuses an order over the shopper's open-order cap; nothing was written, and no
// order holds the request's key.
type TooManyOpenError struct {
	Limit int
	Waiting
}

func (e *TooManyOpenError) Error() string {
	return fmt.Sprintf("%d orders are waiting for payment; at most %d may", e.Pending, e.Limit)
}

// Create writes the order (Insert) and its payment row, which the saga's payment steps mirror the
// provider's answers into, in one transaction; the writes after the order's row go together, and
// with the COMMIT (db.InTx).
func (s Store) Create(ctx context.Context, n New) (Created, error) {
	var out Created
	err := db.InTx(ctx, s.Pool, func(tx db.DBTX) error {
		var err error
		if out, err = Insert(ctx, tx, n); err != nil || !out.Made {
			return err
		}
		return orderstore.New(tx).InsertPayment(ctx, orderstore.InsertPaymentParams{OrderID: out.ID,
			IdempotencyKey: PaymentKey(out.ID), Provider: n.Provider, AmountMinor: n.Quote.TotalMinor, Currency: n.Quote.Currency})
	})
	return out, err
}

// Insert writes the order, its items and its coupon's redemption in the caller's transaction,
// under the unique (user, Idempotency-Key): a second run of the request finds the first order. A
// new order over the shopper's cap (MaxOpen) is refused (TooManyOpenError) before anything is
// written; the count and the insert are one decision under the shopper's lock. A coupon that can
// no longer be redeemed refuses the order with its *pricing.CouponRefusal.
func Insert(ctx context.Context, tx db.DBTX, n New) (Created, error) {
	var out Created
	err := db.InPipe(ctx, tx, func(tx db.DBTX) error {
		var err error
		out, err = insert(ctx, tx, n)
		return err
	})
	return out, err
}

// insert is Insert on a Pipe: the order's items, timeline entry and event go with what follows.
func insert(ctx context.Context, tx db.DBTX, n New) (Created, error) {
	q := orderstore.New(tx)
	_, err := q.GetAddress(ctx, n.AddressID, n.UserID)
	if db.NotFound(err) {
		return Created{}, ErrAddressNotFound
	}
	if err != nil {
		return Created{}, err
	}
	if n.MaxOpen > 0 {
		if err := db.LockUser(ctx, tx, db.LockOpenOrders, n.UserID); err != nil {
			return Created{}, err
		}
	}
	id, err := q.InsertOrder(ctx, orderstore.InsertOrderParams{UserID: n.UserID, IdempotencyKey: n.IdempotencyKey,
		RequestHash: n.RequestHash, WorkflowID: n.WorkflowID, RunID: n.RunID, AddressID: n.AddressID,
		PriceVersion: n.Quote.PriceVersion, TotalMinor: n.Quote.TotalMinor, Currency: n.Quote.Currency,
		MaxOpen: int32(n.MaxOpen)})
	if db.NotFound(err) {
		return existing(ctx, q, n)
	}
	if err != nil {
		return Created{}, err
	}
	for _, it := range n.Quote.Items {
		p := orderstore.InsertOrderItemParams{OrderID: id, SkuID: it.SKUID, SellerID: it.SellerID, Title: it.Title,
			Quantity: it.Quantity, UnitPriceMinor: it.UnitPriceMinor, Currency: it.Currency, CampaignIds: it.Campaigns}
		if it.ListPriceMinor > 0 {
			p.ListPriceMinor = &it.ListPriceMinor
		}
		if err := q.InsertOrderItem(ctx, p); err != nil {
			return Created{}, err
		}
	}
	if n.Quote.Coupon != nil {
		if err := pricing.Redeem(ctx, tx, id, n.UserID, *n.Quote.Coupon); err != nil {
			return Created{}, err
		}
	}
	err = note(ctx, q, id, "created", map[string]any{"workflowId": n.WorkflowID, "total": n.Quote.TotalMinor,
		"currency": n.Quote.Currency})
	if err != nil {
		return Created{}, err
	}
	err = emit.OrderEvent(ctx, tx, id, EventCreated, []byte("{}"))
	return Created{ID: id, Status: StatusPendingPayment, Made: true}, err
}

// existing is the order a request's key already holds, when the insert wrote nothing; the cap's
// refusal when no order holds it.
func existing(ctx context.Context, q *orderstore.Queries, n New) (Created, error) {
	o, err := q.OrderByKey(ctx, n.UserID, n.IdempotencyKey)
	if db.NotFound(err) {
		w, err := waiting(ctx, q, n.UserID)
		if err != nil {
			return Created{}, err
		}
		return Created{}, &TooManyOpenError{Limit: n.MaxOpen, Waiting: w}
	}
	if err != nil {
		return Created{}, err
	}
	if o.RequestHash != n.RequestHash {
		return Created{}, ErrKeyReused
	}
	// The order is this run's to carry on while it is still open: this run made it (its worker
	// died after the commit and the step runs again), or support reset the workflow to an earlier
	// point. A finished order is never touched again, whichever run made it: when it is this
	// run's own, a worker died after the run's first task had decided it (failed it, stock and
	// money given back, the answer recorded) but before the task completed, and the task runs
	// again; its steps must not decide it a second time, perhaps otherwise.
	status := Status(o.Status)
	return Created{ID: o.ID, Status: status, Existing: !status.Open()}, nil
}

// Waiting reads the shopper's orders waiting for payment, which the open-order cap counts.
func (s Store) Waiting(ctx context.Context, userID int64) (Waiting, error) {
	return waiting(ctx, s.q(), userID)
}

func waiting(ctx context.Context, q *orderstore.Queries, userID int64) (Waiting, error) {
	p, err := q.PendingOrdersOf(ctx, userID)
	return Waiting{Pending: p.Pending, NextHoldEnd: p.NextHoldEnd}, err
}

// PricesOf reads back the prices the request's order was made with, if the order exists: they
// were checked when it was made, and the cart may have moved on since.
func (s Store) PricesOf(ctx context.Context, userID int64, idempotencyKey string) (pricing.Quote, bool, error) {
	q := s.q()
	o, err := q.OrderByKey(ctx, userID, idempotencyKey)
	if db.NotFound(err) {
		return pricing.Quote{}, false, nil
	}
	if err != nil {
		return pricing.Quote{}, false, err
	}
	items, err := q.OrderItems(ctx, o.ID)
	if err != nil {
		return pricing.Quote{}, false, err
	}
	quote := pricing.Quote{TotalMinor: o.TotalMinor, Currency: o.Currency, PriceVersion: o.PriceVersion}
	for _, it := range items {
		item := pricing.Item{SKUID: it.SkuID, SellerID: it.SellerID, Title: it.Title, Quantity: it.Quantity,
			UnitPriceMinor: it.UnitPriceMinor, LineTotalMinor: it.UnitPriceMinor * int64(it.Quantity),
			Currency: it.Currency, Campaigns: it.CampaignIds}
		if it.ListPriceMinor != nil {
			item.ListPriceMinor = *it.ListPriceMinor
		}
		quote.Items = append(quote.Items, item)
	}
	if quote.Coupon, err = pricing.CouponOfOrder(ctx, s.Pool, o.ID); err != nil {
		return pricing.Quote{}, false, err
	}
	return quote, true, nil
}

// QueueMade queues, on b, whether the shopper's request idempotencyKey made an order: once the
// batch is read, *made says (PricesOf then reads its prices). A failed read is the batch's error.
func (s Store) QueueMade(b *pgx.Batch, userID int64, idempotencyKey string, made *bool) {
	db.QueueRow(b, orderstore.OrderByKeySQL, []any{userID, idempotencyKey},
		func(_ orderstore.OrderByKeyRow, found bool) { *made = found })
}

// SetHold records when the order's reservation expires, for people reading the order.
func (s Store) SetHold(ctx context.Context, orderID int64, expiresAt time.Time) error {
	return s.q().SetOrderHold(ctx, &expiresAt, orderID)
}

// ErrNotFinal: a transition was asked to a status an order does not end in.
var ErrNotFinal = errors.New("not a final status")

// Transition ends an open order in status to (CONFIRMED, FAILED or CANCELLED) and, in the same
// transaction, settles its coupon (spent when confirmed, given back otherwise), writes the timeline
// entry and the outbox event. It returns false when the order had already ended: a repeat, or
// another actor first, changes nothing.
func (s Store) Transition(ctx context.Context, orderID int64, to Status, code problem.Code,
	detail map[string]any) (bool, error) {
	event, ok := events[to]
	if !ok {
		return false, fmt.Errorf("order %d to %s: %w", orderID, to, ErrNotFinal)
	}
	changed := false
	err := db.InTx(ctx, s.Pool, func(tx db.DBTX) error {
		var err error
		changed, err = transition(ctx, tx, orderID, to, event, code, detail)
		return err
	})
	return changed, err
}

// transition is Transition in the caller's transaction: on a Pipe, the coupon's settling, the
// timeline entry and the event go with what follows the row's move.
func transition(ctx context.Context, tx db.DBTX, orderID int64, to Status, event string, code problem.Code,
	detail map[string]any) (bool, error) {
	changed := false
	err := func() error {
		q := orderstore.New(tx)
		var failure *string
		if code != "" {
			failure = (*string)(&code)
		}
		_, err := q.TransitionOrder(ctx, orderstore.TransitionOrderParams{ToStatus: string(to), FailureCode: failure,
			ID: orderID, FromStatuses: openStatuses})
		if db.NotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		changed = true
		if err := pricing.SettleRedemption(ctx, tx, orderID, string(to)); err != nil {
			return err
		}
		entry := map[string]any{"status": to}
		if code != "" {
			entry["code"] = code
		}
		for k, v := range detail {
			entry[k] = v
		}
		if err := note(ctx, q, orderID, "status", entry); err != nil {
			return err
		}
		extra := []byte("{}")
		if code != "" {
			extra, _ = json.Marshal(map[string]any{"code": code})
		}
		return emit.OrderEvent(ctx, tx, orderID, event, extra)
	}()
	return changed, err
}

// Finished is what Finish did: whether this call ended the order, and the order's status and
// failure code as they stand after it.
type Finished struct {
	Changed     bool         `json:"changed"`
	Status      Status       `json:"status"`
	FailureCode problem.Code `json:"failureCode,omitempty"`
}

// Finish is Transition that also says where the order stands when it had already ended: another
// actor (the payment reconciler, the order's hold) ended it first, and the caller must not report a
// status the row does not have.
func (s Store) Finish(ctx context.Context, orderID int64, to Status, code problem.Code,
	detail map[string]any) (Finished, error) {
	changed, err := s.Transition(ctx, orderID, to, code, detail)
	if err != nil {
		return Finished{}, err
	}
	if changed {
		return Finished{Changed: true, Status: to, FailureCode: code}, nil
	}
	o, err := s.q().GetOrder(ctx, orderID)
	if err != nil {
		return Finished{}, err
	}
	f := Finished{Status: Status(o.Status)}
	if o.FailureCode != nil {
		f.FailureCode = problem.Code(*o.FailureCode)
	}
	return f, nil
}

// Along is a write that rides in the transaction of an order's end (FinishAlong).
type Along func(ctx context.Context, tx db.DBTX) error

// FinishAlong is Finish with other writes in the same transaction, before the order's row moves:
// the capture's mirror, the recorded answer to the request. They are written whether or not this
// call ends the order (each is itself safe to repeat), so that a repeat after a lost answer, or an
// order another actor ended first, still has them.
func (s Store) FinishAlong(ctx context.Context, orderID int64, to Status, code problem.Code,
	detail map[string]any, along ...Along) (Finished, error) {
	return s.FinishAlongIfEnds(ctx, orderID, to, code, detail, nil, along...)
}

// FinishAlongIfEnds is FinishAlong with one more write, ifEnds, made in the same transaction when,
// and only when, this call ends the order: the saga's refusal of an order it failed as it was
// placed, which must not be recorded for an order another actor ended first (a reset run's order
// that is CONFIRMED is sold, not refused). A repeat after a lost answer does not write it again:
// the transaction that ended the order did.
func (s Store) FinishAlongIfEnds(ctx context.Context, orderID int64, to Status, code problem.Code,
	detail map[string]any, ifEnds Along, along ...Along) (Finished, error) {
	event, ok := events[to]
	if !ok {
		return Finished{}, fmt.Errorf("order %d to %s: %w", orderID, to, ErrNotFinal)
	}
	var f Finished
	err := db.InTx(ctx, s.Pool, func(tx db.DBTX) error {
		for _, write := range along {
			if err := write(ctx, tx); err != nil {
				return err
			}
		}
		changed, err := transition(ctx, tx, orderID, to, event, code, detail)
		if err == nil && changed && ifEnds != nil {
			err = ifEnds(ctx, tx)
		}
		if err != nil || changed {
			f = Finished{Changed: changed, Status: to, FailureCode: code}
			return err
		}
		o, err := orderstore.New(tx).GetOrder(ctx, orderID)
		if err != nil {
			return err
		}
		f = Finished{Status: Status(o.Status)}
		if o.FailureCode != nil {
			f.FailureCode = problem.Code(*o.FailureCode)
		}
		return nil
	})
	if err != nil {
		return Finished{}, err
	}
	return f, nil
}

// Park sets the step that ran out of retries and its error on the order, and notes it on the
// timeline: an open order moves to NEEDS_ATTENTION; an ended one (the saga ends the row before it
// gives the order's stock and money back) keeps its status and carries the attention.
//
// An order parked again after it was escalated keeps its escalation (esc).
func (s Store) Park(ctx context.Context, orderID int64, step, cause string, esc *Escalation) error {
	return db.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := orderstore.New(tx)
		detail := map[string]any{"step": step, "error": cause}
		attention := maps.Clone(detail)
		if esc != nil {
			attention["escalatedAt"] = esc.At
			if esc.GivesUpAt != nil {
				attention["givesUpAt"] = esc.GivesUpAt
			}
		}
		raw, _ := json.Marshal(attention)
		if _, err := q.ParkOrder(ctx, nullJSON(raw), orderID); err != nil && !db.NotFound(err) {
			return err
		}
		return note(ctx, q, orderID, "needs_attention", detail)
	})
}

// Escalation is how long a parked order has waited for support: escalated at At, and given up at
// GivesUpAt unless support acts (nil: never, a step giving stock or money back is only retried).
type Escalation struct {
	At        time.Time  `json:"escalatedAt"`
	GivesUpAt *time.Time `json:"givesUpAt,omitempty"`
}

// Escalate marks a parked order escalated, with when it is given up, and notes it on the
// timeline. An order no longer parked is left as it is.
func (s Store) Escalate(ctx context.Context, orderID int64, givesUpAt *time.Time) error {
	return db.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := orderstore.New(tx)
		if _, err := q.EscalateOrder(ctx, givesUpAt, orderID); db.NotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		detail := map[string]any{}
		if givesUpAt != nil {
			detail["givesUpAt"] = givesUpAt
		}
		return note(ctx, q, orderID, "escalated", detail)
	})
}

// Resume takes a parked order back to PENDING_PAYMENT (support chose retry, or the step's own
// retries went through), or clears an ended order's attention; an order not parked is left as it
// is.
func (s Store) Resume(ctx context.Context, orderID int64) error {
	_, err := s.q().ResumeOrder(ctx, orderID)
	if db.NotFound(err) {
		return nil
	}
	return err
}

// Note appends an entry to the order's timeline. What a shopper sees of its detail is
// ShopperDetail's choice.
func (s Store) Note(ctx context.Context, orderID int64, kind string, detail map[string]any) error {
	return note(ctx, s.q(), orderID, kind, detail)
}

// Note appends an entry to the order's timeline in the caller's transaction.
func Note(ctx context.Context, conn db.DBTX, orderID int64, kind string, detail map[string]any) error {
	return note(ctx, orderstore.New(conn), orderID, kind, detail)
}

func note(ctx context.Context, q *orderstore.Queries, orderID int64, kind string, detail map[string]any) error {
	var raw []byte
	if detail != nil {
		var err error
		if raw, err = json.Marshal(detail); err != nil {
			return err
		}
	}
	return q.InsertOrderEvent(ctx, orderID, kind, nullJSON(raw))
}

// RecordOutcome keeps the answer to a request (outcome, JSON), so that the same (user, key) answers
// the same after the order's workflow has closed. The first record wins.
func (s Store) RecordOutcome(ctx context.Context, userID int64, idempotencyKey, requestHash string, orderID int64,
	outcome json.RawMessage) error {
	return OutcomeAlong(userID, idempotencyKey, requestHash, orderID, outcome)(ctx, db.Traced(s.Pool))
}

// OutcomeAlong is RecordOutcome as a write riding in an order's end (FinishAlong).
func OutcomeAlong(userID int64, idempotencyKey, requestHash string, orderID int64, outcome json.RawMessage) Along {
	return func(ctx context.Context, tx db.DBTX) error {
		var id *int64
		if orderID > 0 {
			id = &orderID
		}
		return orderstore.New(tx).InsertIdempotencyRecord(ctx, orderstore.InsertIdempotencyRecordParams{UserID: userID,
			IdempotencyKey: idempotencyKey, RequestHash: requestHash, OrderID: id, Outcome: outcome})
	}
}

// PaymentAlong is RecordPayment as a write riding in an order's end (FinishAlong).
func PaymentAlong(p PaymentUpdate) Along {
	return func(ctx context.Context, tx db.DBTX) error { return DataOf(tx).RecordPayment(ctx, p) }
}

func nullJSON(raw []byte) pqtype.NullRawMessage {
	return pqtype.NullRawMessage{RawMessage: raw, Valid: raw != nil}
}
