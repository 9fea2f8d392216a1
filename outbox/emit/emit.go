// Package emit writes events to the outbox (outbox_events) in the writer's own transaction, so
// that an event exists exactly when the change it reports was committed; the outbox's relay
// (package outbox) delivers them to the broker. Every area that reports a change writes through
// it: the outbox's table is the outbox's alone.
package emit

import (
	"context"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/outbox/internal/outboxstore"
)

// Event writes an event about the aggregate (aggregateType, aggregateID), with its payload, in
// tx.
func Event(ctx context.Context, tx db.DBTX, aggregateType, aggregateID, eventType string, payload []byte) error {
	return outboxstore.New(tx).InsertOutboxEvent(ctx, outboxstore.InsertOutboxEventParams{AggregateType: aggregateType,
		AggregateID: aggregateID, EventType: eventType, Payload: payload})
}

// OrderEvent writes an event about an order, in tx: the payload is the order as it stands and its
// lines (the schema's order_event_payload), with the fields of extra (a JSON object) added.
func OrderEvent(ctx context.Context, tx db.DBTX, orderID int64, eventType string, extra []byte) error {
	return outboxstore.New(tx).InsertOrderOutboxEvent(ctx, orderID, eventType, extra)
}
