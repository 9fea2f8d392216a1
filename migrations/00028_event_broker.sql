-- +goose Up

-- The events the relay publishes to the event broker (NATS JetStream), written in the transaction
-- of the change they announce. A table of its own rather than the old outbox: the workers of
-- releases before the broker, kept running while their orders drain, still run a relay of their
-- own that reads outbox rows and marks them published without publishing anything. Nothing they
-- read ever holds a new event: what they write into outbox is moved here as it is written
-- (outbox_to_broker below), so no relay but the broker's can take an event.
CREATE TABLE outbox_events (
    id             BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type TEXT        NOT NULL,
    aggregate_id   TEXT        NOT NULL,
    event_type     TEXT        NOT NULL,
    payload        JSONB       NOT NULL,
    -- When the change was made (not when its transaction began): the event's CloudEvents time.
    created_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- The broker acknowledged the event (stored on its stream).
    published_at   TIMESTAMPTZ,
    -- A handler of ours that keeps failing on the event (attempts, last_error) sets it aside
    -- (dead_at) so that it cannot hold back the events behind it. A broker that is down never does.
    attempts       INT         NOT NULL DEFAULT 0,
    last_error     TEXT,
    dead_at        TIMESTAMPTZ
) WITH (autovacuum_vacuum_scale_factor = 0.01);
CREATE INDEX outbox_events_unpublished_idx ON outbox_events (id) WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_events_published_idx ON outbox_events (published_at) WHERE published_at IS NOT NULL;

-- An order event's payload: the order as it stands (who, status, total) and its lines (each
-- with its seller, which routes the event to that seller's webhooks). Every order event is written
-- with it, so that what is published is the order at the time of the event.
-- +goose StatementBegin
CREATE FUNCTION order_event_payload(p_order_id BIGINT) RETURNS JSONB
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
               'orderId', o.id, 'userId', o.user_id, 'status', o.status, 'totalMinor', o.total_minor,
               'currency', o.currency, 'placedAt', o.created_at,
               'items', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                                      'skuId', i.sku_id, 'sellerId', i.seller_id, 'title', i.title,
                                      'quantity', i.quantity, 'cancelledQuantity', i.cancelled_quantity,
                                      'unitPriceMinor', i.unit_price_minor) ORDER BY i.sku_id)
                                   FROM order_items i WHERE i.order_id = o.id), '[]'::jsonb))
      FROM orders o WHERE o.id = p_order_id
$$;
-- +goose StatementEnd

-- What an earlier release writes into outbox lands in outbox_events instead: its order events
-- (orderId, status, code) completed with the order as every order event carries it.
-- +goose StatementBegin
CREATE FUNCTION outbox_to_broker() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    payload JSONB := NEW.payload;
BEGIN
    IF NEW.event_type IN ('order.confirmed', 'order.failed', 'order.cancelled') AND payload ? 'orderId' THEN
        payload := COALESCE(order_event_payload((payload->>'orderId')::bigint), '{}'::jsonb) || payload;
    END IF;
    INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, NEW.event_type, payload);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- Events not yet published move over, in their order; those published or set aside stay as the
-- record they are.
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at, attempts, last_error)
SELECT aggregate_type, aggregate_id, event_type,
       CASE WHEN event_type IN ('order.confirmed', 'order.failed', 'order.cancelled') AND payload ? 'orderId'
            THEN COALESCE(order_event_payload((payload->>'orderId')::bigint), '{}'::jsonb) || payload
            ELSE payload END,
       created_at, attempts, last_error
  FROM outbox WHERE published_at IS NULL AND dead_at IS NULL ORDER BY id;
DELETE FROM outbox WHERE published_at IS NULL AND dead_at IS NULL;

CREATE TRIGGER outbox_to_broker BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_to_broker();

-- Payments announce what moved money, whichever path recorded it (the saga's steps, the
-- payment webhook, the reconcilers, a release before this one): a capture, and each refund.
-- +goose StatementBegin
CREATE FUNCTION payment_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.captured_minor > OLD.captured_minor THEN
        INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
        VALUES ('order', NEW.order_id::text, 'payment.captured', jsonb_build_object(
            'orderId', NEW.order_id, 'intentId', NEW.intent_id, 'provider', NEW.provider,
            'capturedMinor', NEW.captured_minor - OLD.captured_minor, 'currency', NEW.currency));
    END IF;
    IF NEW.refunded_minor > OLD.refunded_minor THEN
        INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
        VALUES ('order', NEW.order_id::text, 'payment.refunded', jsonb_build_object(
            'orderId', NEW.order_id, 'intentId', NEW.intent_id, 'provider', NEW.provider,
            'refundedMinor', NEW.refunded_minor - OLD.refunded_minor,
            'refundedTotalMinor', NEW.refunded_minor, 'capturedMinor', NEW.captured_minor,
            'currency', NEW.currency));
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER payments_moved AFTER UPDATE OF captured_minor, refunded_minor ON payments
    FOR EACH ROW EXECUTE FUNCTION payment_moved();

-- +goose Down
DROP TRIGGER payments_moved ON payments;
DROP FUNCTION payment_moved();
DROP TRIGGER outbox_to_broker ON outbox;
DROP FUNCTION outbox_to_broker();
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
SELECT aggregate_type, aggregate_id, event_type, payload, created_at
  FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL AND event_type <> 'stock.changed' ORDER BY id;
DROP FUNCTION order_event_payload(BIGINT);
DROP TABLE outbox_events;
