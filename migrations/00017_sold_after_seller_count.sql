-- +goose Up

-- A seller's report is its count at its sourceUpdatedAt. Units we confirmed after that instant
-- were still on the seller's shelf when it counted, so the report sets on_hand to its count less
-- those units (SoldAfterCount in db/queries/inventory.sql, inventory/seller.go). For that a
-- reservation keeps the instant it was confirmed and, when a confirmed order is restocked, the
-- instant its units came back (the auditor's sold-within-supplied reads both).
ALTER TABLE stock_reservations
    ADD COLUMN confirmed_at TIMESTAMPTZ,
    ADD COLUMN restocked_at TIMESTAMPTZ;

-- Confirms made before this migration: the true instant lies between the reservation and the end
-- of its hold (a confirm needs an ACTIVE reservation). The end of the hold is the later bound, so
-- a late report stamped within that hold takes a unit the seller may already have counted out
-- rather than selling one twice.
UPDATE stock_reservations SET confirmed_at = least(expires_at, now()) WHERE status = 'CONFIRMED';

-- The report's lookup: a row's units confirmed after an instant, read from the index alone.
CREATE INDEX stock_reservations_row_confirmed_idx ON stock_reservations (sku_id, warehouse_id, confirmed_at)
    INCLUDE (quantity) WHERE status = 'CONFIRMED';

-- The last report as the seller sent it: its count, and the units sold after its stamp that were
-- taken off it (on_hand was set to greatest(reported_quantity - sold_after_report, 0)).
-- reported_quantity is NULL for a row no report or first count ever set.
ALTER TABLE inventory
    ADD COLUMN reported_quantity INT CHECK (reported_quantity >= 0),
    ADD COLUMN sold_after_report INT NOT NULL DEFAULT 0 CHECK (sold_after_report >= 0);

-- Opening count of the stock that exists already: the count that, reported at the row's last
-- stamp, leaves today's on_hand (what is on the shelf plus what was sold after that stamp).
UPDATE inventory i
   SET reported_quantity = i.on_hand + coalesce(s.qty, 0), sold_after_report = coalesce(s.qty, 0)
  FROM (SELECT iv.sku_id, iv.warehouse_id, sum(r.quantity)::int AS qty
          FROM inventory iv
          LEFT JOIN stock_reservations r
                 ON r.sku_id = iv.sku_id AND r.warehouse_id = iv.warehouse_id AND r.status = 'CONFIRMED'
                AND (iv.source_updated_at IS NULL OR r.confirmed_at > iv.source_updated_at)
         GROUP BY iv.sku_id, iv.warehouse_id) s
 WHERE s.sku_id = i.sku_id AND s.warehouse_id = i.warehouse_id;

-- A report's ledger entry says what the seller counted and what was sold after its stamp, so a
-- reader sees why on_hand_after differs from the count.
ALTER TABLE inventory_ledger
    ADD COLUMN reported_quantity INT,
    ADD COLUMN sold_after_report INT;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inventory_ledger_append() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d  INT;
    rd INT;
    k  VARCHAR(8);
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.on_hand <> 0 THEN
            INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta,
                                          source_updated_at, reported_quantity, sold_after_report)
            VALUES (NEW.sku_id, NEW.warehouse_id, 'SUPPLY', NEW.on_hand, NEW.on_hand, NEW.reserved,
                    NEW.source_updated_at, coalesce(NEW.reported_quantity, NEW.on_hand), NEW.sold_after_report);
        END IF;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta)
        VALUES (OLD.sku_id, OLD.warehouse_id, 'REMOVED', -OLD.on_hand, 0, -OLD.reserved);
        RETURN NULL;
    END IF;
    d := NEW.on_hand - OLD.on_hand;
    rd := NEW.reserved - OLD.reserved;
    k := CASE
        WHEN NEW.source_updated_at IS DISTINCT FROM OLD.source_updated_at THEN 'SUPPLY'
        WHEN d < 0 AND rd = d THEN 'SALE'
        WHEN d > 0 AND rd = 0 THEN 'RESTOCK'
        ELSE 'OTHER'
    END;
    INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta,
                                  source_updated_at, reported_quantity, sold_after_report)
    VALUES (NEW.sku_id, NEW.warehouse_id, k, d, NEW.on_hand, rd, NEW.source_updated_at,
            CASE WHEN k = 'SUPPLY' THEN NEW.reported_quantity END,
            CASE WHEN k = 'SUPPLY' THEN NEW.sold_after_report END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- Every applied report gets its entry, also one whose count less the units sold after it leaves
-- on_hand where it was.
DROP TRIGGER inventory_ledger_upd ON inventory;
CREATE TRIGGER inventory_ledger_upd AFTER UPDATE OF on_hand, source_updated_at ON inventory
    FOR EACH ROW WHEN (OLD.on_hand IS DISTINCT FROM NEW.on_hand
                       OR OLD.source_updated_at IS DISTINCT FROM NEW.source_updated_at)
    EXECUTE FUNCTION inventory_ledger_append();

-- +goose Down
DROP TRIGGER inventory_ledger_upd ON inventory;
CREATE TRIGGER inventory_ledger_upd AFTER UPDATE OF on_hand ON inventory
    FOR EACH ROW WHEN (OLD.on_hand IS DISTINCT FROM NEW.on_hand)
    EXECUTE FUNCTION inventory_ledger_append();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inventory_ledger_append() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d  INT;
    rd INT;
    k  VARCHAR(8);
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.on_hand <> 0 THEN
            INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta, source_updated_at)
            VALUES (NEW.sku_id, NEW.warehouse_id, 'SUPPLY', NEW.on_hand, NEW.on_hand, NEW.reserved, NEW.source_updated_at);
        END IF;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta)
        VALUES (OLD.sku_id, OLD.warehouse_id, 'REMOVED', -OLD.on_hand, 0, -OLD.reserved);
        RETURN NULL;
    END IF;
    d := NEW.on_hand - OLD.on_hand;
    rd := NEW.reserved - OLD.reserved;
    k := CASE
        WHEN NEW.source_updated_at IS DISTINCT FROM OLD.source_updated_at THEN 'SUPPLY'
        WHEN d < 0 AND rd = d THEN 'SALE'
        WHEN d > 0 AND rd = 0 THEN 'RESTOCK'
        ELSE 'OTHER'
    END;
    INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta, source_updated_at)
    VALUES (NEW.sku_id, NEW.warehouse_id, k, d, NEW.on_hand, rd, NEW.source_updated_at);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

ALTER TABLE inventory_ledger DROP COLUMN sold_after_report, DROP COLUMN reported_quantity;
ALTER TABLE inventory DROP COLUMN sold_after_report, DROP COLUMN reported_quantity;
DROP INDEX stock_reservations_row_confirmed_idx;
ALTER TABLE stock_reservations DROP COLUMN restocked_at, DROP COLUMN confirmed_at;
