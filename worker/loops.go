package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"go.temporal.io/api/serviceerror"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/kafkasink"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/outbox"
	"github.com/marketplace/checkout/webhooks"
	"github.com/marketplace/checkout/workflows"
)

// Loop is a long-running part of the worker process that is not a Temporal activity: it runs
// until ctx ends and returns nil then.
type Loop struct {
	Name string
	Run  func(ctx context.Context) error
}

// Loops lists the worker's long-running loops.
func Loops(d Deps) []Loop {
	var loops []Loop

	// The availability projector: stock.changed events from the broker into the cart's stock hints.
	var obs availability.Observer
	if d.Metrics != nil {
		obs = d.Metrics
	}
	projector := availability.NewProjector(d.Pool, d.Broker, obs, d.Log)
	if d.Metrics != nil {
		d.Metrics.RegisterAvailabilityGauges(projector)
	}
	// With the cart's stock hints off nobody reads the projection: its upkeep waits.
	projector.Paused = func(ctx context.Context) bool { return !d.Features.Enabled(ctx, features.CartStockHints) }
	loops = append(loops, Loop{Name: "availability projector", Run: projector.Run})

	// The outbox relay: every event to the broker, in order, each acknowledged before it is marked;
	// a seller shortfall also becomes a signal to the order's workflow.
	out := &outbox.Relay{Pool: d.Pool, Log: d.Log, Broker: d.Broker, Prepare: d.Broker.EnsureStream,
		Retention: d.Config.Events.OutboxRetention, Handlers: map[string]outbox.Handler{
			inventory.EventOrderStockShortfall: shortfallToWorkflow(d),
		}}
	if d.Metrics != nil {
		out.Published, out.Dead, out.BrokerFailures = d.Metrics.OutboxPublished, d.Metrics.OutboxDead, d.Metrics.OutboxBrokerFailures
		d.Metrics.RegisterOutboxGauges(out)
		// The orders waiting in the saga: database figures like the relays' lag, so served by the
		// worker's /metrics alone.
		d.Metrics.RegisterOrderGauges(orderGauges{q: order.DataOf(d.Pool)})
	}
	loops = append(loops, Loop{Name: "outbox relay", Run: out.Run})

	// A shop that runs Kafka gets every event there too.
	if len(d.Config.Events.KafkaBrokers) > 0 {
		loops = append(loops, Loop{Name: "kafka sink", Run: func(ctx context.Context) error {
			sink, err := kafkasink.New(d.Broker, kafkasink.Options{Brokers: d.Config.Events.KafkaBrokers,
				Topic: d.Config.Events.KafkaTopic}, d.Log)
			if err != nil {
				return err
			}
			defer sink.Close()
			return sink.Run(ctx)
		}})
	}

	// Sellers' webhooks: the broker's order events into deliveries, and their dispatch.
	fan := &webhooks.Fanout{Pool: d.Pool, Broker: d.Broker, Log: d.Log}
	loops = append(loops, Loop{Name: "webhooks fan-out", Run: fan.Run})
	dispatch := &webhooks.Dispatcher{Pool: d.Pool, Log: d.Log,
		Targets:     webhooks.Targets{AllowPrivate: d.Config.Webhooks.AllowPrivateTargets},
		Concurrency: d.Config.Webhooks.Concurrency, Timeout: d.Config.Webhooks.Timeout, RetryFor: d.Config.Webhooks.RetryFor,
		RetryBase: d.Config.Webhooks.RetryBase, RetryMax: d.Config.Webhooks.RetryMax}
	if d.Metrics != nil {
		dispatch.Obs = d.Metrics
	}
	loops = append(loops, Loop{Name: "webhooks dispatcher", Run: dispatch.Run})

	if d.Temporal != nil && d.Metrics != nil {
		runs, checkError := d.Metrics.RegisterRetiredBuildRuns()
		loops = append(loops, retiredWatch(d.Temporal, d.Config.DeploymentName, d.Log, runs, checkError))
	}

	return loops
}

// shortfallToWorkflow tells an order's workflow that a seller's count took its reserved stock. An
// order whose workflow has ended needs nothing more.
func shortfallToWorkflow(d Deps) outbox.Handler {
	return func(ctx context.Context, e outbox.Event) error {
		var ev inventory.ShortfallEvent
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			d.Log.Error("malformed shortfall event", "event_id", e.ID, "error", err)
			return nil
		}
		wfID, err := order.DataOf(d.Pool).OrderWorkflowID(ctx, ev.OrderID)
		if db.NotFound(err) {
			d.Log.Warn("shortfall for an unknown order", "order_id", ev.OrderID)
			return nil
		}
		if err != nil {
			return err
		}
		err = d.Temporal.SignalWorkflow(ctx, wfID, "", workflows.SignalStockShortfall,
			workflows.ShortfallSignal{SKUID: ev.SKUID, WarehouseID: ev.WarehouseID})
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil
		}
		if err == nil {
			d.Log.Info("order told of a stock shortfall", "order_id", ev.OrderID, "workflow_id", wfID,
				"sku_id", ev.SKUID, "warehouse_id", strconv.Itoa(int(ev.WarehouseID)))
		}
		return err
	}
}
