-- +goose Up

-- Availability projection: sellable units per SKU (sum over warehouses of on_hand - reserved), the
-- cheap read path of the cart and product pages. It is a hint, seconds behind at most; orders are
-- decided by the inventory itself.
CREATE TABLE sku_availability (
    sku_id        BIGINT      PRIMARY KEY,
    available     INT         NOT NULL,
    -- The newest change event folded into this row; it only grows.
    last_event_id BIGINT      NOT NULL DEFAULT 0,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Inventory change events, written by a trigger in the same transaction as the change, so that no
-- committed change goes unannounced. The row names only the SKU: the relay recomputes the truth
-- from the inventory, so events can be coalesced, replayed or applied late without harm. The relay
-- deletes the rows it has applied; what is here is the backlog.
CREATE TABLE inventory_changes (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku_id     BIGINT      NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000);  -- a queue: vacuum by count

-- The relay's cursor (one row): the highest event id applied and how many events it has applied.
-- Relays lock this row (SKIP LOCKED) for each batch, so one relay works at a time.
CREATE TABLE availability_relay (
    id             INT         PRIMARY KEY CHECK (id = 1),
    last_event_id  BIGINT      NOT NULL DEFAULT 0,
    events_applied BIGINT      NOT NULL DEFAULT 0,
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO availability_relay (id) VALUES (1);

-- The trigger only appends: it touches no inventory row and no shared row, so the reserve path's
-- row lock is held no longer than one index insert. Updates that leave the sellable count alone
-- (source_updated_at, version) announce nothing.
-- +goose StatementBegin
CREATE FUNCTION inventory_changed() RETURNS trigger
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

CREATE TRIGGER inventory_changed_ins AFTER INSERT OR DELETE ON inventory
    FOR EACH ROW EXECUTE FUNCTION inventory_changed();
CREATE TRIGGER inventory_changed_upd AFTER UPDATE OF on_hand, reserved ON inventory
    FOR EACH ROW WHEN (OLD.on_hand - OLD.reserved IS DISTINCT FROM NEW.on_hand - NEW.reserved)
    EXECUTE FUNCTION inventory_changed();

-- Start from the truth for the stock that exists already.
INSERT INTO sku_availability (sku_id, available)
SELECT sku_id, sum(on_hand - reserved)::int FROM inventory GROUP BY sku_id;

-- +goose Down
DROP TRIGGER inventory_changed_upd ON inventory;
DROP TRIGGER inventory_changed_ins ON inventory;
DROP FUNCTION inventory_changed();
DROP TABLE availability_relay, inventory_changes, sku_availability;
