package worker

import (
	"context"
	"time"

	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/order"
)

var _ metrics.OrderGauges = orderGauges{}

// orderGauges reads the orders waiting in the saga and their unknown payments for /metrics.
type orderGauges struct{ q order.Data }

func (g orderGauges) OrderFigures(ctx context.Context) (metrics.OrderFigures, error) {
	var f metrics.OrderFigures
	rows, err := g.q.WaitingOrders(ctx)
	if err != nil {
		return f, err
	}
	// Both statuses always, so that an empty one reads 0 rather than no series.
	for _, status := range []order.Status{order.StatusPendingPayment, order.StatusNeedsAttention} {
		w := metrics.WaitingOrders{Status: string(status)}
		for _, r := range rows {
			if order.Status(r.Status) != status {
				continue
			}
			w.Orders, w.Oldest = r.Orders, seconds(r.OldestSeconds)
			f.Escalated += r.Escalated
			if status == order.StatusPendingPayment {
				f.PastHold = seconds(r.PastHoldSeconds)
			}
		}
		f.Waiting = append(f.Waiting, w)
	}
	unknown, err := g.q.UnknownPayments(ctx)
	if err != nil {
		return f, err
	}
	f.UnknownPayments, f.UnknownOldest = unknown.Payments, seconds(unknown.OldestSeconds)
	return f, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
