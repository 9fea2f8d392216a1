package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
)

// JobObserver receives the figures of the scheduled jobs' runs, for metrics; nil means none.
type JobObserver interface {
	SweepDone(released int, oldestAge time.Duration, err error)
	ReconcileDone(drifts int, err error)
	PaymentReconcileDone(checked int, resolved map[string]int, err error)
	// LineCancelsFinished counts the line cancellations a payment reconciliation finished for a
	// workflow that was gone, and those it could not finish.
	LineCancelsFinished(finished, failed int)
}

// Signaler tells an order's workflow what the provider said about its payment. The worker
// implements it on the Temporal client, because activities do not know the workflows. A
// workflow that has ended answers ErrWorkflowGone.
type Signaler interface {
	PaymentResolved(ctx context.Context, workflowID string, orderID int64, res PaymentResult) error
	// Running reports whether the order's workflow is still running.
	Running(ctx context.Context, workflowID string) (bool, error)
}

// ErrWorkflowGone: the order's workflow has ended (support terminated it) while the order is
// still open.
var ErrWorkflowGone = errors.New("the order's workflow has ended")

// PaymentReconciler resolves payments whose outcome the checkout does not know. It is the
// backstop behind the saga, which asks the provider itself while it waits: it covers an order
// that lost its webhook or its authorize answer, and one whose workflow is gone. It is also the
// backstop of the line cancellations: one whose workflow is gone is finished here.
type PaymentReconciler struct {
	Pool     *pgxpool.Pool
	Gateway  payment.Gateway
	Signaler Signaler
	Observer JobObserver
	// Inventory puts the units of a line cancellation it finishes back on the shelf.
	Inventory *inventory.Engine
	// LineCancelWorkflowID names the workflow of a line cancellation recorded without one (by a
	// release before the record named it): the one its request id derives.
	LineCancelWorkflowID func(orderID int64, requestID string) string
}

// ReconcilePaymentsInput sizes a run; zero values mean the defaults.
type ReconcilePaymentsInput struct {
	// PendingAfter is how long a payment may stay PENDING before its authorize counts as lost
	// (default one minute).
	PendingAfter time.Duration `json:"pendingAfter,omitempty"`
	// OrphanAfter is how long past its hold an open order may stay open before its workflow is
	// checked for being gone (default two minutes: the order's own grace and its hold child's
	// work are over by then); and how long after it was recorded a line cancellation may stay
	// unfinished before its workflow is.
	OrphanAfter time.Duration `json:"orphanAfter,omitempty"`
	// LateWindow is how long after an order failed or was cancelled its payment is still looked
	// at, for an authorization that arrived after the order gave up (default a day).
	LateWindow time.Duration `json:"lateWindow,omitempty"`
	// SettleAfter is how long after a failed or cancelled order last changed a payment whose key
	// the provider never saw is settled, off the list (default DefaultSettleAfter).
	SettleAfter time.Duration `json:"settleAfter,omitempty"`
	// OrderID limits the run to one order (0: all).
	OrderID   int64 `json:"orderId,omitempty"`
	BatchSize int32 `json:"batchSize,omitempty"`
}

// PaymentMethodTokenTTL is how long a payment method token is kept for an order request whose
// payment never got a definite answer from the provider.
const PaymentMethodTokenTTL = 24 * time.Hour

// ResolvedPayment is one payment the reconciler asked the provider about.
type ResolvedPayment struct {
	OrderID int64  `json:"orderId"`
	Was     string `json:"was"`
	Status  string `json:"status"`
}

// ReconcilePaymentsResult counts one run. Unresolved payments (the provider never saw the key,
// or could not be asked) are asked about again on the next run.
type ReconcilePaymentsResult struct {
	Checked   int `json:"checked"`
	Resolved  int `json:"resolved"`
	NotFound  int `json:"notFound"`
	Failed    int `json:"failed"`
	Signalled int `json:"signalled"`
	// Orphaned counts open orders whose workflow was gone, which this run ended.
	Orphaned int `json:"orphaned"`
	// Reversed counts payments of failed or cancelled orders found holding money, and reversed.
	Reversed int `json:"reversed,omitempty"`
	// NothingHeld counts payments of failed or cancelled orders that the provider never saw,
	// settled by this run once their order had been over for SettleAfter: they leave the list.
	NothingHeld int `json:"nothingHeld,omitempty"`
	// LineCancelsFinished counts recorded line cancellations whose workflow was gone, finished by
	// this run (refunded, back on the shelf where the reason says so, announced); LineCancelsFailed
	// those it could not finish yet (the next run tries again).
	LineCancelsFinished int `json:"lineCancelsFinished,omitempty"`
	LineCancelsFailed   int `json:"lineCancelsFailed,omitempty"`
	// TokensForgotten counts payment method tokens of requests that never reached a definite
	// payment answer, forgotten after PaymentMethodTokenTTL.
	TokensForgotten int `json:"tokensForgotten,omitempty"`
	// ByStatus counts the resolved payments by the provider's status, in status order.
	ByStatus   []StatusCount     `json:"byStatus,omitempty"`
	Payments   []ResolvedPayment `json:"payments,omitempty"`
	FirstError string            `json:"firstError,omitempty"`
}

// StatusCount is how many payments resolved to one status.
type StatusCount struct {
	Status string `json:"status"`
	Count  int    `json:"count"`
}

// maxListed bounds the per-item lists in a job's result, which travels in the workflow history.
const maxListed = 50

// ReconcilePayments asks the provider, by the order's idempotency key, about every payment of an
// open order that is UNKNOWN (or PENDING for longer than PendingAfter), tells the order's workflow
// the answer and then mirrors it into the payments row. The row is the to-do list and is ticked
// off last: if the signal fails, the next run asks again. Running it twice, or twice at once,
// only repeats idempotent lookups and signals the order already acts on once.
func (a *PaymentReconciler) ReconcilePayments(ctx context.Context, in ReconcilePaymentsInput) (res ReconcilePaymentsResult, err error) {
	byStatus := map[string]int{}
	defer func() {
		for _, st := range slices.Sorted(maps.Keys(byStatus)) {
			res.ByStatus = append(res.ByStatus, StatusCount{Status: st, Count: byStatus[st]})
		}
		if a.Observer != nil {
			a.Observer.PaymentReconcileDone(res.Checked, byStatus, err)
			a.Observer.LineCancelsFinished(res.LineCancelsFinished, res.LineCancelsFailed)
		}
	}()
	if in.PendingAfter <= 0 {
		in.PendingAfter = time.Minute
	}
	if in.OrphanAfter <= 0 {
		in.OrphanAfter = DefaultOrphanAfter
	}
	if in.LateWindow <= 0 {
		in.LateWindow = DefaultLateWindow
	}
	if in.SettleAfter <= 0 {
		in.SettleAfter = DefaultSettleAfter
	}
	if in.BatchSize <= 0 {
		in.BatchSize = 200
	}
	q := order.DataOf(db.Traced(a.Pool))
	pays := &Payments{Pool: a.Pool, Gateway: a.Gateway}
	var after int64
	for {
		rows, err := q.PaymentsToReconcile(ctx, order.PaymentsToReconcileQuery{AfterOrderID: after, OrderID: in.OrderID,
			PendingSeconds: in.PendingAfter.Seconds(), OrphanAfterSeconds: in.OrphanAfter.Seconds(),
			LateSeconds: in.LateWindow.Seconds(), BatchSize: in.BatchSize})
		if err != nil {
			return res, fmt.Errorf("listing the payments to reconcile: %w", err)
		}
		for _, r := range rows {
			after = r.OrderID
			res.Checked++
			if err := a.resolve(ctx, pays, r, in, &res, byStatus); err != nil {
				res.Failed++
				if res.FirstError == "" {
					res.FirstError = fmt.Sprintf("order %d: %v", r.OrderID, err)
				}
			}
		}
		if len(rows) < int(in.BatchSize) {
			break
		}
	}
	if in.OrderID == 0 {
		n, err := q.ForgetStalePaymentMethodTokens(ctx, PaymentMethodTokenTTL.Seconds())
		if err != nil {
			return res, fmt.Errorf("forgetting stale payment method tokens: %w", err)
		}
		res.TokensForgotten = int(n)
		if err := a.finishLineCancels(ctx, in, &res); err != nil {
			return res, err
		}
	}
	if res.Failed > 0 && res.Resolved == 0 && res.NotFound == 0 {
		// Nothing could be asked or told (the provider or Temporal is down): fail the run, so
		// that it is retried and shows as failed.
		return res, errors.New("payment reconciler: " + res.FirstError)
	}
	return res, nil
}

func (a *PaymentReconciler) resolve(ctx context.Context, pays *Payments, r order.PaymentToReconcile,
	in ReconcilePaymentsInput, res *ReconcilePaymentsResult, byStatus map[string]int) error {
	switch status := order.Status(r.OrderStatus); {
	case status == order.StatusFailed && problem.Code(r.FailureCode) == problem.Orphaned:
		// Ended as ORPHANED by an earlier run that stopped before the payment was reversed, or
		// whose reversal found nothing at the provider.
		return a.finishOrphan(ctx, pays, r, in.SettleAfter, res)
	case status.GaveUp():
		return a.reverseLate(ctx, pays, r, in.SettleAfter, res)
	}
	running, err := a.Signaler.Running(ctx, r.WorkflowID)
	if err != nil {
		return err
	}
	if !running {
		return a.endOrphan(ctx, pays, r, res)
	}
	switch payment.Status(r.Status) {
	case payment.StatusUnknown, payment.StatusPending, payment.StatusRequiresAction:
	default:
		// Here only for being past its hold; its workflow runs and knows its payment.
		return nil
	}
	ref, err := pays.ref(ctx, r.OrderID)
	if err != nil {
		return err
	}
	intent, err := pays.lookup(ctx, ref)
	if errors.Is(err, payment.ErrNotFound) || (err == nil && intent.Status == payment.StatusCreated) {
		// The provider never made the intent, or never confirmed it: nothing was authorized. The
		// order decides on its own (it authorizes again, or its hold expires).
		res.NotFound++
		return nil
	}
	if errors.Is(err, errNotSearchableYet) {
		return nil // asked again on the next run, once the provider's search can see it
	}
	if err != nil {
		return err
	}
	if intent.Status == payment.Status(r.Status) {
		// No news (a 3-D Secure payment the shopper has not answered yet).
		return nil
	}
	pr := PaymentResult{Status: intent.Status, IntentID: intent.ID, RedirectURL: intent.RedirectURL,
		DeclineCode: intent.DeclineCode}
	if err := a.Signaler.PaymentResolved(ctx, r.WorkflowID, r.OrderID, pr); errors.Is(err, ErrWorkflowGone) {
		return a.endOrphan(ctx, pays, r, res)
	} else if err != nil {
		return err
	}
	res.Signalled++
	if _, err := pays.mirror(ctx, r.OrderID, intent); err != nil {
		return err
	}
	res.Resolved++
	byStatus[string(pr.Status)]++
	if len(res.Payments) < maxListed {
		res.Payments = append(res.Payments, ResolvedPayment{OrderID: r.OrderID, Was: r.Status, Status: string(pr.Status)})
	}
	return nil
}

// EndIfOrphanedInput names an order and its workflow.
type EndIfOrphanedInput struct {
	OrderID    int64  `json:"orderId"`
	WorkflowID string `json:"workflowId"`
	// By names who ends it, for the order's timeline.
	By string `json:"by,omitempty"`
}

// Orphan says what EndIfOrphaned found and did.
type Orphan struct {
	// Running: the order's workflow runs (nothing was done).
	Running bool `json:"running"`
	// Released counts the reservations given back; Ended says the order was still open and is now
	// FAILED (ORPHANED), its payment reversed.
	Released int  `json:"released"`
	Ended    bool `json:"ended"`
}

// EndIfOrphaned gives back what an order holds once its workflow has ended: if the order was left
// open (support terminated its workflow), the order ends as the reconciler ends an orphan, its
// stock and payment given back; if it gave up, the stock it may still hold. An order whose workflow
// confirmed it keeps its stock, and one whose workflow runs (a reset run) is left alone.
func (a *PaymentReconciler) EndIfOrphaned(ctx context.Context, in EndIfOrphanedInput) (Orphan, error) {
	var out Orphan
	o, err := order.DataOf(a.Pool).GetOrder(ctx, in.OrderID)
	if err != nil {
		return out, err
	}
	if order.Status(o.Status).Open() {
		running, err := a.Signaler.Running(ctx, in.WorkflowID)
		if err != nil || running {
			return Orphan{Running: running}, err
		}
		var res ReconcilePaymentsResult
		out.Ended, out.Released, err = a.endOrphanAs(ctx, &Payments{Pool: a.Pool, Gateway: a.Gateway},
			order.PaymentToReconcile{OrderID: in.OrderID, WorkflowID: in.WorkflowID}, &res, cmp.Or(in.By, "payment reconciler"))
		if err != nil || out.Ended {
			return out, err
		}
	}
	// Ended (by its workflow, or just now by someone else): whoever ended it gave back what it
	// held; giving back here only makes sure.
	g, err := a.orders().GiveBack(ctx, in.OrderID)
	out.Released = g.Released
	return out, err
}

func (a *PaymentReconciler) orders() order.Store { return order.Store{Pool: a.Pool} }

// reverseLate reverses the payment of an order that failed or was cancelled when the provider
// holds money for it after all: an authorization (or its 3-D Secure approval) that arrived after
// the order's compensation had found nothing to reverse. A payment the provider does not know is
// settled once the order has been over for longer than settleAfter (settleNothingHeld), and
// asked about again on the next runs until then.
func (a *PaymentReconciler) reverseLate(ctx context.Context, pays *Payments, r order.PaymentToReconcile,
	settleAfter time.Duration, res *ReconcilePaymentsResult) error {
	p, err := pays.Reverse(ctx, r.OrderID)
	if err != nil {
		return err
	}
	if p.Status == payment.StatusNotFound {
		return a.settleNothingHeld(ctx, r, settleAfter, res)
	}
	res.Reversed++
	if len(res.Payments) < maxListed {
		res.Payments = append(res.Payments, ResolvedPayment{OrderID: r.OrderID, Was: r.Status, Status: string(p.Status)})
	}
	return nil
}

// DefaultLateWindow is ReconcilePaymentsInput.LateWindow when zero.
const DefaultLateWindow = 24 * time.Hour

// DefaultSettleAfter is ReconcilePaymentsInput.SettleAfter when zero: far past the time any call of
// an order (an authorization's attempt takes seconds) can take to reach the provider, and past a
// few runs that each asked; an order whose giving back waits for support meanwhile has changed
// since, which starts the time again.
const DefaultSettleAfter = 15 * time.Minute

// DefaultOrphanAfter is ReconcilePaymentsInput.OrphanAfter when zero.
const DefaultOrphanAfter = 2 * time.Minute

// endOrphan ends an open order whose workflow is gone (terminated by hand before it finished):
// nobody else will. The order fails, its stock goes back and its payment is reversed — whatever
// the provider did meanwhile (a late 3-D Secure approval included). Each step is conditional,
// so a repeat changes nothing.
func (a *PaymentReconciler) endOrphan(ctx context.Context, pays *Payments, r order.PaymentToReconcile,
	res *ReconcilePaymentsResult) error {
	_, _, err := a.endOrphanAs(ctx, pays, r, res, "payment reconciler")
	return err
}

// endOrphanAs ends an open order whose workflow is gone, as by says, and gives back what it held
// (order.Store.GiveUp, then the payment); it reports whether the order was still open, and the
// reservations it released. The order was read open before its workflow was found gone: the
// workflow may have ended it meanwhile (confirmed, with the money captured). Only an order still
// open is ended here, and only then is anything given back.
func (a *PaymentReconciler) endOrphanAs(ctx context.Context, pays *Payments, r order.PaymentToReconcile,
	res *ReconcilePaymentsResult, by string) (bool, int, error) {
	g, err := a.orders().GiveUp(ctx, r.OrderID, order.StatusFailed, problem.Orphaned, map[string]any{"by": by})
	if err == nil && g.Ended {
		err = a.reverseOrphan(ctx, pays, r, res)
	}
	return g.Ended, g.Released, err
}

// finishOrphan gives back what an order ended as ORPHANED still holds: its stock, then its
// payment. Every step is conditional, so a repeat changes nothing. A payment the provider never
// saw is settled as reverseLate settles it.
func (a *PaymentReconciler) finishOrphan(ctx context.Context, pays *Payments, r order.PaymentToReconcile,
	settleAfter time.Duration, res *ReconcilePaymentsResult) error {
	if _, err := a.orders().GiveBack(ctx, r.OrderID); err != nil {
		return err
	}
	p, err := pays.Reverse(ctx, r.OrderID)
	if err != nil {
		return err
	}
	if p.Status != payment.StatusNotFound {
		countOrphan(r, res)
		return nil
	}
	return a.settleNothingHeld(ctx, r, settleAfter, res)
}

// settleNothingHeld settles the payment of a closed order that the provider never saw, once the
// order has been over for longer than settleAfter: no call of the order can still reach the
// provider then, so the payment leaves the list instead of being asked about at every run for the
// late window (an order refused out of stock never authorized at all). A call that lands later
// after all records its answer on the payment row (the order's own step, or the provider's
// webhook), which puts it back on the list.
func (a *PaymentReconciler) settleNothingHeld(ctx context.Context, r order.PaymentToReconcile,
	settleAfter time.Duration, res *ReconcilePaymentsResult) error {
	res.NotFound++
	n, err := order.DataOf(db.Traced(a.Pool)).SettleNothingHeld(ctx, r.OrderID, settleAfter.Seconds())
	if err != nil {
		return fmt.Errorf("settling the payment of order %d: %w", r.OrderID, err)
	}
	if n == 1 {
		res.NothingHeld++
		if len(res.Payments) < maxListed {
			res.Payments = append(res.Payments, ResolvedPayment{OrderID: r.OrderID, Was: r.Status, Status: "NOTHING_HELD"})
		}
	}
	return nil
}

// reverseOrphan reverses the payment of an order ended as ORPHANED, whatever the provider did
// meanwhile (a late 3-D Secure approval included), and counts the orphan.
func (a *PaymentReconciler) reverseOrphan(ctx context.Context, pays *Payments, r order.PaymentToReconcile,
	res *ReconcilePaymentsResult) error {
	if _, err := pays.Reverse(ctx, r.OrderID); err != nil {
		return err
	}
	countOrphan(r, res)
	return nil
}

// countOrphan counts an orphan whose payment was reversed (or found holding nothing as it was ended).
func countOrphan(r order.PaymentToReconcile, res *ReconcilePaymentsResult) {
	res.Orphaned++
	if len(res.Payments) < maxListed {
		res.Payments = append(res.Payments, ResolvedPayment{OrderID: r.OrderID, Was: r.Status, Status: "ORPHAN_ENDED"})
	}
}

// finishLineCancels is the backstop of the line cancellations: one recorded more than OrphanAfter
// ago and not finished, whose workflow no longer runs (terminated by hand, or its run lost), would
// never pay its refund. It is finished here by the steps its workflow runs, each idempotent: the
// refund under the cancellation's own key (money never moves twice, even beside a workflow started
// again for the same request), the units back on the shelf once, the announcement once. One that
// cannot be finished yet is counted and tried again by the next run; only a failure to list them
// fails the run.
func (a *PaymentReconciler) finishLineCancels(ctx context.Context, in ReconcilePaymentsInput, res *ReconcilePaymentsResult) error {
	q := order.DataOf(db.Traced(a.Pool))
	var after int64
	for {
		rows, err := q.LineCancellationsToFinish(ctx, after, in.OrphanAfter.Seconds(), in.BatchSize)
		if err != nil {
			return fmt.Errorf("listing the line cancellations to finish: %w", err)
		}
		for _, r := range rows {
			after = r.ID
			finished, err := a.finishLineCancel(ctx, r)
			switch {
			case err != nil:
				res.LineCancelsFailed++
				if res.FirstError == "" {
					res.FirstError = fmt.Sprintf("line cancellation %d of order %d: %v", r.ID, r.OrderID, err)
				}
			case finished:
				res.LineCancelsFinished++
			}
		}
		if len(rows) < int(in.BatchSize) {
			return nil
		}
	}
}

// finishLineCancel finishes one recorded line cancellation when its workflow no longer runs, and
// says whether it did. A refund the provider refuses leaves the cancellation waiting for support
// (its attention, shown on the order), as its workflow would have; once fixed at the provider,
// the next run pays it.
func (a *PaymentReconciler) finishLineCancel(ctx context.Context, r order.LineCancellationToFinish) (bool, error) {
	wf := r.WorkflowID
	if wf == "" {
		if a.LineCancelWorkflowID == nil {
			return false, errors.New("no workflow recorded for it")
		}
		wf = a.LineCancelWorkflowID(r.OrderID, r.RequestID)
	}
	if running, err := a.Signaler.Running(ctx, wf); err != nil || running {
		return false, err
	}
	orders := &Orders{Pool: a.Pool}
	c, err := lineCancelByID(ctx, order.DataOf(a.Pool), r.ID)
	if err != nil {
		return false, err
	}
	if !c.Refunded {
		if _, err := (&Payments{Pool: a.Pool, Gateway: a.Gateway}).RefundLineCancel(ctx, r.ID); err != nil {
			if appErr := (*temporal.ApplicationError)(nil); errors.As(err, &appErr) && appErr.NonRetryable() {
				if aerr := orders.LineCancelAttention(ctx, LineCancelAttentionInput{CancellationID: r.ID,
					Step: "refund", Error: appErr.Message(), Code: string(FailureCode(err))}); aerr != nil {
					return false, errors.Join(err, aerr)
				}
			}
			return false, err
		}
	}
	if c.Restock && !c.Restocked {
		if _, err := (&Inventory{Engine: a.Inventory}).RestockLineCancel(ctx, r.ID); err != nil {
			return false, err
		}
	}
	if _, err := orders.AnnounceLineCancel(ctx, r.ID); err != nil {
		return false, err
	}
	if activity.IsActivity(ctx) {
		activity.GetLogger(ctx).Warn("line cancellation finished for a workflow that was gone", "order_id", r.OrderID,
			"workflow_id", wf, "cancellation_id", r.ID)
	}
	return true, nil
}
