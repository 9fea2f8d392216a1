-- +goose Up

-- The availability projection is fed from the broker: a durable consumer of stock.changed
-- (availability.Projector) keeps each (SKU, warehouse) row's sellable units, newest event first,
-- and sums them per SKU into sku_availability, which the cart reads.
CREATE TABLE sku_warehouse_availability (
    sku_id        BIGINT      NOT NULL,
    warehouse_id  INT         NOT NULL,
    sellable      INT         NOT NULL,
    -- The newest stock.changed event applied to the row (0: the row's first value, taken below);
    -- an older one, redelivered or late, changes nothing.
    last_event_id BIGINT      NOT NULL DEFAULT 0,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (sku_id, warehouse_id)
);

-- No write to the inventory runs between the starting values and the new trigger.
LOCK TABLE inventory IN SHARE MODE;

-- Stock changes become stock.changed events instead of rows of inventory_changes (whose relay, in
-- releases before this one, now finds nothing): the same triggers (migration 00003: every change
-- of a row's sellable count, in the change's transaction), now announcing the row's sellable units
-- and the change's cause, read from the change itself. The event's id is taken while the row is
-- locked, so one row's events are numbered in the order of their commits.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inventory_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r inventory;
    cause TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD; r.on_hand := 0; r.reserved := 0; cause := 'removed';
    ELSIF TG_OP = 'INSERT' THEN
        r := NEW; cause := 'seller_count';
    ELSE
        r := NEW;
        cause := CASE
            WHEN NEW.source_updated_at IS DISTINCT FROM OLD.source_updated_at THEN 'seller_count'
            WHEN NEW.on_hand = OLD.on_hand AND NEW.reserved > OLD.reserved THEN 'reserved'
            WHEN NEW.on_hand = OLD.on_hand AND NEW.reserved < OLD.reserved THEN 'released'
            WHEN NEW.on_hand > OLD.on_hand AND NEW.reserved = OLD.reserved THEN 'restocked'
            ELSE 'adjusted' END;
    END IF;
    INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
    VALUES ('stock', r.sku_id || '/' || r.warehouse_id, 'stock.changed', jsonb_build_object(
        'skuId', r.sku_id, 'warehouseId', r.warehouse_id, 'sellable', r.on_hand - r.reserved,
        'onHand', r.on_hand, 'reserved', r.reserved, 'cause', cause));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

INSERT INTO sku_warehouse_availability (sku_id, warehouse_id, sellable)
SELECT sku_id, warehouse_id, on_hand - reserved FROM inventory;
INSERT INTO sku_availability AS a (sku_id, available)
SELECT sku_id, sum(sellable)::int FROM sku_warehouse_availability GROUP BY sku_id
ON CONFLICT (sku_id) DO UPDATE SET available = EXCLUDED.available, updated_at = now();

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inventory_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO inventory_changes (sku_id) VALUES (OLD.sku_id);
    ELSE
        INSERT INTO inventory_changes (sku_id) VALUES (NEW.sku_id);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TABLE sku_warehouse_availability;
