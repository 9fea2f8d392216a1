package audit

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/payment"
)

// Provider is the payment provider's own record of the money: what it holds for each order. The
// product never reads a provider's tables; a provider's adapter answers from its reporting API,
// the simulator's (paysim.Records) from its own schema.
type Provider interface {
	// OrderIntents returns the intents of each of orderIDs that has any, under any key (a second
	// intent of an order counts), oldest first.
	OrderIntents(ctx context.Context, orderIDs []int64) (map[int64][]payment.Intent, error)
}

// SnapshotProvider is a Provider whose record is kept in the audited database, as the
// simulator's is: the audit reads it in its own snapshot, so that the product's record and the
// provider's are seen at one instant.
type SnapshotProvider interface {
	Provider
	OrderIntentsIn(ctx context.Context, tx pgx.Tx, orderIDs []int64) (map[int64][]payment.Intent, error)
}

// providerIntents asks o.Provider for the intents of orderIDs; nil without a provider.
func (a *auditor) providerIntents(ctx context.Context, orderIDs []int64) (map[int64][]payment.Intent, error) {
	var (
		intents map[int64][]payment.Intent
		err     error
	)
	switch p := a.o.Provider.(type) {
	case nil:
		return nil, nil
	case SnapshotProvider:
		intents, err = p.OrderIntentsIn(ctx, a.tx, orderIDs)
	default:
		intents, err = p.OrderIntents(ctx, orderIDs)
	}
	if err != nil {
		return nil, fmt.Errorf("payment provider: %w", err)
	}
	return intents, nil
}

// providerSide is what the provider's intents say of one order's money.
type providerSide struct {
	checked                 bool
	currency                string // the order's
	otherCurrency           int    // intents in another currency than the order's
	intents, captures, open int
	captured, refunded      int64
	amountMin, amountMax    int64
	firstID                 string // the least id, the one a single intent has
	list                    string // "id STATUS, …", oldest first
}

func providerSideOf(checked bool, currency string, intents []payment.Intent) providerSide {
	p := providerSide{checked: checked, currency: currency, intents: len(intents)}
	list := make([]string, len(intents))
	for i, in := range intents {
		if in.CapturedMinor > 0 {
			p.captures++
		}
		if in.Currency != currency {
			p.otherCurrency++
		}
		if in.Status == payment.StatusAuthorized || in.Status == payment.StatusRequiresAction {
			p.open++
		}
		p.captured += in.CapturedMinor
		p.refunded += in.RefundedMinor
		if i == 0 || in.AmountMinor < p.amountMin {
			p.amountMin = in.AmountMinor
		}
		if i == 0 || in.AmountMinor > p.amountMax {
			p.amountMax = in.AmountMinor
		}
		if i == 0 || in.ID < p.firstID {
			p.firstID = in.ID
		}
		list[i] = in.ID + " " + string(in.Status)
	}
	p.list = strings.Join(list, ", ")
	return p
}

// paidOnce: one intent, in the order's currency, captured once for the order's total (both in
// that currency's minor units), the one the payments row names. Unchecked, it holds.
func (p providerSide) paidOnce(total int64, rowIntentID string) bool {
	return !p.checked || (p.intents == 1 && p.otherCurrency == 0 && p.captures == 1 && p.captured == total &&
		p.amountMin == total && p.firstID == rowIntentID)
}

// keeps: the provider keeps kept (captured less refunded), in the order's currency. Unchecked, it
// holds.
func (p providerSide) keeps(kept int64) bool {
	return !p.checked || (p.otherCurrency == 0 && p.captured-p.refunded == kept)
}

func (p providerSide) intentsDetail() string {
	if !p.checked {
		return "not checked"
	}
	return fmt.Sprintf("%d intents (%s), %d captured, captured %s, refunded %s, amount %s%s", p.intents, orNone(p.list),
		p.captures, p.money(p.captured), p.money(p.refunded), amountRange(p.amountMin, p.amountMax, p.currency), p.currencyNote())
}

func (p providerSide) keptDetail() string {
	if !p.checked {
		return "provider not checked"
	}
	return fmt.Sprintf("provider captured %s and refunded %s (keeps %s)%s", p.money(p.captured),
		p.money(p.refunded), p.money(p.captured-p.refunded), p.currencyNote())
}

func (p providerSide) movedDetail() string {
	if !p.checked {
		return "provider not checked"
	}
	return fmt.Sprintf("provider captured %s and refunded %s%s", p.money(p.captured), p.money(p.refunded), p.currencyNote())
}

func (p providerSide) money(minor int64) string { return money.FormatIn(minor, p.currency) }

// currencyNote names intents held in another currency than the order's, whose amounts cannot be
// added to its own.
func (p providerSide) currencyNote() string {
	if p.otherCurrency == 0 {
		return ""
	}
	return fmt.Sprintf(", %d intents not in %s", p.otherCurrency, p.currency)
}
