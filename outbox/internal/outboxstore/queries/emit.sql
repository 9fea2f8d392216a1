-- name: InsertOutboxEvent :exec
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload);

-- name: InsertOrderOutboxEvent :exec
-- An order event: the order as it stands and its lines (order_event_payload), with extra fields.
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', (@order_id::bigint)::text, @event_type, order_event_payload(@order_id::bigint) || @extra::jsonb);
