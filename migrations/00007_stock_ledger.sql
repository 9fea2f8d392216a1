-- +goose Up

-- The stock ledger: every change of inventory.on_hand, appended by a trigger in the same
-- transaction as the change, whatever statement made it. The invariant auditor (audit/) checks
-- it against two records kept apart from it:
--   * per row, the ledger adds up to on_hand (no movement went unrecorded);
--   * the units it shows leaving other than by sellers' reports equal the row's CONFIRMED
--     reservations (every unit sold left the shelf once, and nothing else left or came);
--   * CONFIRMED units never exceed what sellers supplied (the SUPPLY entries).
-- A SUPPLY entry is a seller's report (a new row, or an update that moves source_updated_at,
-- which only the seller path sets); everything else is a movement of ours. The other kinds only
-- help a reader: SALE (on_hand and reserved fell together: a confirm), RESTOCK (on_hand rose,
-- reserved unchanged: a confirmed reservation given back), OTHER (neither), REMOVED (row deleted).
--
-- The trigger fires only when on_hand changes, so the reserve path (reserved only) never runs it.
CREATE TABLE inventory_ledger (
    id                BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku_id            BIGINT      NOT NULL,
    warehouse_id      INT         NOT NULL,
    kind              VARCHAR(8)  NOT NULL,
    delta             INT         NOT NULL,
    on_hand_after     INT         NOT NULL,
    reserved_delta    INT         NOT NULL DEFAULT 0,
    source_updated_at TIMESTAMPTZ,
    note              TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT inventory_ledger_kind_valid CHECK (kind IN ('SUPPLY', 'SALE', 'RESTOCK', 'OTHER', 'REMOVED'))
);

-- +goose StatementBegin
CREATE FUNCTION inventory_ledger_append() RETURNS trigger
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

CREATE TRIGGER inventory_ledger_ins AFTER INSERT OR DELETE ON inventory
    FOR EACH ROW EXECUTE FUNCTION inventory_ledger_append();
CREATE TRIGGER inventory_ledger_upd AFTER UPDATE OF on_hand ON inventory
    FOR EACH ROW WHEN (OLD.on_hand IS DISTINCT FROM NEW.on_hand)
    EXECUTE FUNCTION inventory_ledger_append();

-- Append-only: an entry is never changed or removed (only a superuser who disables triggers can).
-- +goose StatementBegin
CREATE FUNCTION inventory_ledger_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'inventory_ledger is append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER inventory_ledger_no_update BEFORE UPDATE OR DELETE ON inventory_ledger
    FOR EACH ROW EXECUTE FUNCTION inventory_ledger_immutable();
CREATE TRIGGER inventory_ledger_no_truncate BEFORE TRUNCATE ON inventory_ledger
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_ledger_immutable();

-- Opening balance of the stock that exists already (the triggers above hold the table's lock from
-- here to the commit, so no change slips between): what is on the shelf plus what was sold from it
-- counts as supplied, and what was sold as sold.
INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, source_updated_at, note)
SELECT i.sku_id, i.warehouse_id, 'SUPPLY', i.on_hand + coalesce(c.qty, 0), i.on_hand + coalesce(c.qty, 0),
       i.source_updated_at, 'opening balance'
FROM inventory i
LEFT JOIN (SELECT sku_id, warehouse_id, sum(quantity)::int AS qty
           FROM stock_reservations WHERE status = 'CONFIRMED' GROUP BY sku_id, warehouse_id) c
       ON c.sku_id = i.sku_id AND c.warehouse_id = i.warehouse_id
WHERE i.on_hand + coalesce(c.qty, 0) <> 0;

INSERT INTO inventory_ledger (sku_id, warehouse_id, kind, delta, on_hand_after, reserved_delta, note)
SELECT i.sku_id, i.warehouse_id, 'SALE', -c.qty, i.on_hand, 0, 'opening balance'
FROM inventory i
JOIN (SELECT sku_id, warehouse_id, sum(quantity)::int AS qty
      FROM stock_reservations WHERE status = 'CONFIRMED' GROUP BY sku_id, warehouse_id) c
  ON c.sku_id = i.sku_id AND c.warehouse_id = i.warehouse_id;

-- +goose Down
DROP TRIGGER inventory_ledger_no_truncate ON inventory_ledger;
DROP TRIGGER inventory_ledger_no_update ON inventory_ledger;
DROP FUNCTION inventory_ledger_immutable();
DROP TRIGGER inventory_ledger_upd ON inventory;
DROP TRIGGER inventory_ledger_ins ON inventory;
DROP FUNCTION inventory_ledger_append();
DROP TABLE inventory_ledger;
