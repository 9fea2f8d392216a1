// Package audit checks the product's invariants on a running or finished system: no oversell, no
// stock stranded, no money kept without goods, no order left open past its hold. It reads
// PostgreSQL in one snapshot, Temporal's visibility store and the payment provider's record of the
// money (a Provider, never the provider's tables), changes nothing, and names every violation with
// the row or order and the numbers. `checkout audit` runs it, and so does every load run and the
// end-to-end load test.
//
// The stock checks rest on inventory_ledger (migrations/00007_stock_ledger.sql): a trigger
// appends every change of on_hand in the same transaction, classified as a seller's SUPPLY or a
// movement of ours. The ledger is compared with the two records written apart from it — the
// inventory row (it must add up to on_hand) and the CONFIRMED reservations (our movements must
// be exactly the units sold) — so neither side can drift without the other disagreeing. Apart
// from those, sold-within-supplied holds the sales to the seller's own word: since its last count,
// no more units were sold than it counted. It reads the count as the seller sent it and the
// instants our reservations were confirmed, never on_hand or the ledger, so it catches a sold
// unit put back on sale even when every record agrees with the others.
package audit

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/audit/internal/auditstore"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// Invariants, by the names reports and runbooks use.
const (
	ReservedWithinOnHand     = "reserved-within-on-hand"
	ReservedMatchesActive    = "reserved-matches-active"
	LedgerMatchesOnHand      = "ledger-matches-on-hand"
	SalesMatchConfirmed      = "sales-match-confirmed"
	SoldWithinSupplied       = "sold-within-supplied"
	ConfirmedOrderFulfilled  = "confirmed-order-fulfilled"
	ConfirmedOrderPaidOnce   = "confirmed-order-paid-once"
	MoneyMatchesKeptUnits    = "money-matches-kept-units"
	FailedOrderStockReleased = "failed-order-stock-released"
	FailedOrderNoMoneyKept   = "failed-order-no-money-kept"
	FailedOrderAuthVoided    = "failed-order-authorization-voided"
	NoStaleReservation       = "no-stale-reservation"
	NoOpenOrderPastHold      = "no-open-order-past-hold"
	CouponCountMatches       = "coupon-count-matches"
	CouponFollowsOrder       = "coupon-follows-order"
)

// Invariants lists every invariant in report order, with what it means.
var Invariants = []struct{ Name, Rule string }{
	{ReservedWithinOnHand, "every inventory row: 0 ≤ reserved ≤ on_hand"},
	{ReservedMatchesActive, "every inventory row: reserved = units of its ACTIVE reservations"},
	{LedgerMatchesOnHand, "every inventory row: its stock ledger adds up to on_hand"},
	{SalesMatchConfirmed, "every inventory row: units the ledger shows leaving (other than by seller reports) = units of its CONFIRMED reservations"},
	{SoldWithinSupplied, "every inventory row: units sold since the seller's last count (confirmed after its stamp, less units sold before it and restocked after) ≤ that count, as the seller sent it; an independent guard, read from neither on_hand nor the ledger"},
	{ConfirmedOrderFulfilled, "every CONFIRMED order: all reservations CONFIRMED, covering each ordered line exactly (and its units cancelled after payment); items add up to the total"},
	{ConfirmedOrderPaidOnce, "every CONFIRMED order: one provider intent, captured once for the order total; the payments row agrees"},
	{MoneyMatchesKeptUnits, "every CONFIRMED order: captured − refunded = the total of the units kept (ordered less cancelled after payment, less their share of a coupon), at the provider and in the payments row; not judged while a cancellation's refund is under way (within the slack) or waits for support"},
	{FailedOrderStockReleased, "every FAILED or CANCELLED order: no ACTIVE or CONFIRMED reservation"},
	{FailedOrderNoMoneyKept, "every FAILED or CANCELLED order: everything captured was refunded (provider and payments row)"},
	{FailedOrderAuthVoided, "every FAILED or CANCELLED order: no authorization left open (voided, declined or never made)"},
	{NoStaleReservation, "no ACTIVE reservation past its hold by more than the sweeper period (plus slack)"},
	{NoOpenOrderPastHold, "no order or its workflows still open past the hold (plus slack) without a reason (NEEDS_ATTENTION is one)"},
	{CouponCountMatches, "every coupon: redeemed = its redemptions not given back, and never beyond its limit"},
	{CouponFollowsOrder, "every redemption: spent with a CONFIRMED order, given back with a FAILED or CANCELLED one, held only while the order is open"},
}

// Options say what "too late" means and where to look.
type Options struct {
	// HoldTTL is the server's HOLD_TTL: the hold of an order that never recorded one.
	HoldTTL time.Duration
	// SweeperPeriod is how often the reservation sweeper runs: an ACTIVE reservation may outlive
	// its hold by that much.
	SweeperPeriod time.Duration
	// Slack is added to every time limit: the order's own grace after its hold (30 s), and the
	// time compensations take. Default 1 minute.
	Slack time.Duration
	// Since limits the order checks to orders created since then (zero: all). Stock checks always
	// cover every row.
	Since time.Time
	// Visibility, when set, is asked for the open order and hold workflows of TaskQueue.
	Visibility Visibility
	TaskQueue  string
	// Provider, when set, gives the payment provider's record of the orders' money, which the
	// money invariants hold against the payments rows. Without it only the payments rows are
	// judged, and the report says the provider's side was not checked.
	Provider Provider
}

// DefaultSlack is Options.Slack when zero: the order's own grace after its hold (30 s), a step's
// retries after the answer before the order parks (workflows.DefaultStepRetryWindow, 2 min, after
// a few seconds' first try), and a margin.
const DefaultSlack = 3 * time.Minute

// attentionWindow is how long after an order needed attention, or had a support action, it may
// show open without NEEDS_ATTENTION: a parked step retried, by support or by itself every
// workflows.ParkRetryEvery, runs with the order open again.
func (o Options) attentionWindow() time.Duration { return workflows.ParkRetryEvery + o.Slack }

// Violation is one broken invariant: which, where, and the numbers.
type Violation struct {
	Invariant string `json:"invariant"`
	Subject   string `json:"subject"`
	Detail    string `json:"detail"`
}

// Check is one invariant's result.
type Check struct {
	Invariant  string `json:"invariant"`
	Rule       string `json:"rule"`
	Violations int    `json:"violations"`
}

// Report is what one audit found.
type Report struct {
	CheckedAt          time.Time        `json:"checkedAt"`
	InventoryRows      int64            `json:"inventoryRows"`
	LedgerEntries      int64            `json:"ledgerEntries"`
	Reservations       int64            `json:"reservations"`
	ActiveReservations int64            `json:"activeReservations"`
	Orders             map[string]int64 `json:"orders"`
	// OpenWorkflows is how many open order and hold workflows Temporal listed; -1 when Temporal
	// was not asked.
	OpenWorkflows int `json:"openWorkflows"`
	// ProviderChecked says whether the payment provider's record was read (Options.Provider):
	// when false, the money invariants judged the payments rows alone.
	ProviderChecked bool        `json:"providerChecked"`
	Checks          []Check     `json:"checks"`
	Violations      []Violation `json:"violations"`
}

// OK reports whether no invariant is broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Run audits the database behind pool (and Temporal, when o.Visibility is set; the payment
// provider's record, when o.Provider is). A broken invariant is a Violation in the report, not an
// error; an error means the audit could not run.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options) (Report, error) {
	if o.Slack <= 0 {
		o.Slack = DefaultSlack
	}
	if o.HoldTTL <= 0 {
		o.HoldTTL = 15 * time.Minute
	}
	a := &auditor{o: o, seen: map[string]int{}}
	rep := Report{Orders: map[string]int64{}, OpenWorkflows: -1, ProviderChecked: o.Provider != nil}

	// Temporal first: a workflow that closes between this listing and the snapshot below is
	// judged with the snapshot's order row, under the slack.
	var open []openWorkflow
	if o.Visibility != nil {
		var err error
		if open, err = listOpen(ctx, o.Visibility, o.TaskQueue); err != nil {
			return rep, fmt.Errorf("temporal visibility: %w", err)
		}
		rep.OpenWorkflows = len(open)
	}

	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			q := auditstore.New(tx)
			counts, err := q.AuditCounts(ctx)
			if err != nil {
				return err
			}
			rep.CheckedAt, rep.InventoryRows, rep.LedgerEntries = counts.CheckedAt, counts.InventoryRows, counts.LedgerEntries
			rep.Reservations, rep.ActiveReservations = counts.Reservations, counts.ActiveReservations
			byStatus, err := q.AuditOrderCounts(ctx, o.Since)
			if err != nil {
				return err
			}
			for _, s := range byStatus {
				rep.Orders[s.Status] = s.Orders
			}
			a.tx = tx
			for _, step := range []func(context.Context, *auditstore.Queries) error{
				a.stock, a.settledOrders, a.coupons, a.staleReservations, a.openOrders,
			} {
				if err := step(ctx, q); err != nil {
					return err
				}
			}
			if o.Visibility != nil {
				return a.openWorkflows(ctx, q, open, counts.CheckedAt)
			}
			return nil
		})
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	rep.Violations = a.violations
	for _, inv := range Invariants {
		rep.Checks = append(rep.Checks, Check{Invariant: inv.Name, Rule: inv.Rule, Violations: a.count[inv.Name]})
	}
	return rep, nil
}

type auditor struct {
	o Options
	// tx is the snapshot the audit reads, which a provider whose record is in the same database
	// reads too.
	tx         pgx.Tx
	violations []Violation
	seen       map[string]int // invariant + subject → index, so one subject is reported once per invariant
	count      map[string]int
}

func (a *auditor) add(invariant, subject, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	key := invariant + "\x00" + subject
	if i, ok := a.seen[key]; ok {
		a.violations[i].Detail += "; " + detail
		return
	}
	if a.count == nil {
		a.count = map[string]int{}
	}
	a.count[invariant]++
	a.seen[key] = len(a.violations)
	a.violations = append(a.violations, Violation{Invariant: invariant, Subject: subject, Detail: detail})
}

func rowSubject(sku int64, wh int32) string { return fmt.Sprintf("sku %d @ warehouse %d", sku, wh) }
func orderSubject(id int64) string          { return "order " + strconv.FormatInt(id, 10) }

// stock checks every inventory row against its ledger and its reservations.
func (a *auditor) stock(ctx context.Context, q *auditstore.Queries) error {
	rows, err := q.AuditInventoryRows(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		s := rowSubject(r.SkuID, r.WarehouseID)
		onHand := strconv.FormatInt(r.OnHand, 10)
		if !r.RowExists {
			onHand = "0 (no inventory row)"
		}
		if r.OverReserved {
			a.add(ReservedWithinOnHand, s, "reserved %d, on_hand %s", r.Reserved, onHand)
		}
		if r.ReservedDrift {
			a.add(ReservedMatchesActive, s, "reserved %d, ACTIVE reservations hold %d units", r.Reserved, r.Active)
		}
		if r.LedgerOff {
			a.add(LedgerMatchesOnHand, s, "on_hand %s, the ledger's %d entries add up to %d (a change of on_hand went unrecorded)",
				onHand, r.LedgerEntries, r.LedgerTotal)
		}
		if r.SalesOff {
			if r.Moved > 0 {
				a.add(SalesMatchConfirmed, s, "the ledger shows %d units arriving that no seller reported, CONFIRMED reservations hold %d units",
					r.Moved, r.Confirmed)
			} else {
				a.add(SalesMatchConfirmed, s, "the ledger shows %d units leaving other than by seller reports, CONFIRMED reservations hold %d units",
					-r.Moved, r.Confirmed)
			}
		}
		if r.Oversold && r.Counted != nil {
			at := "before any sale"
			if r.CountedAt != nil {
				at = "at " + r.CountedAt.UTC().Format(time.RFC3339Nano)
			}
			a.add(SoldWithinSupplied, s, "the seller counted %d units %s, %d have been sold since", *r.Counted, at, r.SoldSinceCount)
		}
	}
	return nil
}

// settledBatch is how many settled orders the audit judges at a time: the provider is asked for
// their intents together.
const settledBatch = 1000

// settledOrders checks stock and money of every order that reached a final status, a batch at a
// time: the stock and the payments row from the snapshot, the provider's intents from o.Provider.
func (a *auditor) settledOrders(ctx context.Context, q *auditstore.Queries) error {
	p := auditstore.AuditSettledOrdersParams{Since: a.o.Since, SettleSeconds: a.o.Slack.Seconds(), BatchSize: settledBatch}
	for {
		rows, err := q.AuditSettledOrders(ctx, p)
		if err != nil || len(rows) == 0 {
			return err
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		intents, err := a.providerIntents(ctx, ids)
		if err != nil {
			return err
		}
		for _, r := range rows {
			a.settledOrder(r, intents)
		}
		if len(rows) < settledBatch {
			return nil
		}
		p.After = rows[len(rows)-1].ID
	}
}

// settledOrder judges one settled order, naming each broken invariant in the order the report
// has always listed them.
func (a *auditor) settledOrder(r auditstore.AuditSettledOrdersRow, intents map[int64][]payment.Intent) {
	s := orderSubject(r.ID)
	status := r.Status
	if r.FailureCode != "" {
		status += " (" + r.FailureCode + ")"
	}
	p := providerSideOf(a.o.Provider != nil, r.Currency, intents[r.ID])
	f := func(minor int64) string { return money.FormatIn(minor, r.Currency) }
	confirmed := order.Status(r.Status) == order.StatusConfirmed
	rowCaptured := payment.Status(r.PaymentStatus) == payment.StatusCaptured || payment.Status(r.PaymentStatus) == payment.StatusRefunded
	if r.Unfulfilled {
		a.add(ConfirmedOrderFulfilled, s, "CONFIRMED with %d reservations (%d CONFIRMED, %d ACTIVE), %d ordered lines not covered exactly by CONFIRMED stock, items add up to %s, order total %s",
			r.Reservations, r.ConfirmedN, r.ActiveN, r.UnmatchedLines, f(r.ItemsTotal), f(r.TotalMinor))
	}
	if confirmed && !(p.paidOnce(r.TotalMinor, r.PaymentIntentID) && rowCaptured &&
		r.PaymentAmount == r.TotalMinor && r.PaymentCaptured == r.TotalMinor) {
		a.add(ConfirmedOrderPaidOnce, s, "order total %s; provider: %s; payments row: %s, intent %q, amount %s, captured %s, refunded %s",
			f(r.TotalMinor), p.intentsDetail(), orNone(r.PaymentStatus),
			r.PaymentIntentID, f(r.PaymentAmount), f(r.PaymentCaptured), f(r.PaymentRefunded))
	}
	if confirmed && r.RefundsUnderWay == 0 && (!p.keeps(r.KeptTotal) || r.PaymentCaptured-r.PaymentRefunded != r.KeptTotal) {
		a.add(MoneyMatchesKeptUnits, s, "units kept are worth %s (order total %s); %s; payments row captured %s and refunded %s (keeps %s)",
			f(r.KeptTotal), f(r.TotalMinor), p.keptDetail(),
			f(r.PaymentCaptured), f(r.PaymentRefunded),
			f(r.PaymentCaptured-r.PaymentRefunded))
	}
	if r.StockKept {
		a.add(FailedOrderStockReleased, s, "%s still holds %d ACTIVE reservations (%d units) and %d CONFIRMED (%d units)",
			status, r.ActiveN, r.ActiveUnits, r.ConfirmedN, r.ConfirmedUnits)
	}
	if !confirmed && (!p.keeps(0) || r.PaymentCaptured != r.PaymentRefunded) {
		a.add(FailedOrderNoMoneyKept, s, "%s: %s; payments row captured %s and refunded %s",
			status, p.movedDetail(), f(r.PaymentCaptured), f(r.PaymentRefunded))
	}
	if !confirmed && p.open > 0 {
		a.add(FailedOrderAuthVoided, s, "%s: %d provider intents still open (%s)", status, p.open, p.list)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func amountRange(lo, hi int64, currency string) string {
	if lo == hi {
		return money.FormatIn(lo, currency)
	}
	return money.FormatIn(lo, currency) + "…" + money.FormatIn(hi, currency)
}

// coupons checks that a coupon is never spent twice or beyond its limit, and that a redemption
// goes the way of its order.
func (a *auditor) coupons(ctx context.Context, q *auditstore.Queries) error {
	counts, err := q.AuditCoupons(ctx)
	if err != nil {
		return err
	}
	for _, c := range counts {
		a.add(CouponCountMatches, "coupon "+c.Code, "redeemed %d of at most %d, but %d redemptions are not given back",
			c.Redeemed, c.MaxRedemptions, c.Held)
	}
	rows, err := q.AuditRedemptions(ctx, a.o.Since)
	if err != nil {
		return err
	}
	for _, r := range rows {
		a.add(CouponFollowsOrder, orderSubject(r.OrderID), "order %s, its coupon redemption %s", r.OrderStatus, r.RedemptionStatus)
	}
	return nil
}

// staleReservations finds ACTIVE reservations that both the hold child and the sweeper missed.
func (a *auditor) staleReservations(ctx context.Context, q *auditstore.Queries) error {
	allowed := a.o.SweeperPeriod + a.o.Slack
	rows, err := q.AuditStaleReservations(ctx, allowed.Seconds())
	if err != nil {
		return err
	}
	for _, r := range rows {
		a.add(NoStaleReservation, fmt.Sprintf("reservation %d (order %d, %s)", r.ID, r.OrderID, rowSubject(r.SkuID, r.WarehouseID)),
			"ACTIVE, %d units, its hold ended %s ago (allowed: sweeper period %s + slack %s)",
			r.Quantity, seconds(r.OverdueSeconds), a.o.SweeperPeriod, a.o.Slack)
	}
	return nil
}

// openOrders finds orders still waiting for payment well after their hold ended.
func (a *auditor) openOrders(ctx context.Context, q *auditstore.Queries) error {
	rows, err := q.AuditOpenOrdersPastHold(ctx, a.o.HoldTTL.Seconds(), a.o.Slack.Seconds(), a.o.attentionWindow().Seconds())
	if err != nil {
		return err
	}
	for _, r := range rows {
		a.add(NoOpenOrderPastHold, orderSubject(r.ID), "order row %s %s past its hold (slack %s)",
			r.Status, seconds(r.PastHoldSeconds), a.o.Slack)
	}
	return nil
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

// openWorkflows judges the open order and hold workflows against their orders' rows.
func (a *auditor) openWorkflows(ctx context.Context, q *auditstore.Queries, open []openWorkflow, now time.Time) error {
	if len(open) == 0 {
		return nil
	}
	var wfIDs []string
	var orderIDs []int64
	for _, w := range open {
		if w.holdOf > 0 {
			orderIDs = append(orderIDs, w.holdOf)
		} else {
			wfIDs = append(wfIDs, w.id)
		}
	}
	rows, err := q.AuditOrdersOfWorkflows(ctx, a.o.attentionWindow().Seconds(), wfIDs, orderIDs)
	if err != nil {
		return err
	}
	byWorkflow := map[string]auditstore.AuditOrdersOfWorkflowsRow{}
	byID := map[int64]auditstore.AuditOrdersOfWorkflowsRow{}
	for _, r := range rows {
		byWorkflow[r.WorkflowID], byID[r.ID] = r, r
	}
	sort.Slice(open, func(i, j int) bool { return open[i].id < open[j].id })
	slack := a.o.Slack
	for _, w := range open {
		subject := "workflow " + w.id
		if w.holdOf > 0 {
			o, ok := byID[w.holdOf]
			limit := w.start.Add(a.o.HoldTTL)
			if ok && o.HoldExpiresAt != nil {
				limit = *o.HoldExpiresAt
			}
			if now.After(limit.Add(slack)) {
				a.add(NoOpenOrderPastHold, orderSubject(w.holdOf), "hold child %s still open %s after the hold ended",
					w.id, now.Sub(limit).Round(time.Second))
			}
			continue
		}
		if w.needsAttention {
			continue
		}
		o, ok := byWorkflow[w.id]
		switch {
		case !ok:
			if now.After(w.start.Add(a.o.HoldTTL + slack)) {
				a.add(NoOpenOrderPastHold, subject, "open for %s with no order row (OrderStatus %q)",
					now.Sub(w.start).Round(time.Second), w.orderStatus)
			}
		case order.Status(o.Status) == order.StatusNeedsAttention, o.AttentionRecent:
		case order.Status(o.Status).Final():
			if now.After(o.UpdatedAt.Add(slack)) {
				a.add(NoOpenOrderPastHold, orderSubject(o.ID), "workflow %s still open %s after the order became %s (OrderStatus %q)",
					w.id, now.Sub(o.UpdatedAt).Round(time.Second), o.Status, w.orderStatus)
			}
		default:
			limit := o.CreatedAt.Add(a.o.HoldTTL)
			if o.HoldExpiresAt != nil {
				limit = *o.HoldExpiresAt
			}
			if now.After(limit.Add(slack)) {
				a.add(NoOpenOrderPastHold, orderSubject(o.ID), "workflow %s open %s past the hold, order %s (OrderStatus %q, NeedsAttention false)",
					w.id, now.Sub(limit).Round(time.Second), o.Status, w.orderStatus)
			}
		}
	}
	return nil
}

// holdOrderID reads the order id of a hold child's workflow id.
func holdOrderID(workflowID string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(workflowID, "hold-"), 10, 64)
	if err != nil || !strings.HasPrefix(workflowID, "hold-") {
		return 0
	}
	return n
}
