-- +goose Up

-- confirm_orders confirms a batch of paid orders in one transaction: the combining path of the
-- engine's Confirm (inventory/combiner.go). Every paid order's confirm takes its SKU's inventory
-- row; with synchronous commit each transaction holds that row until its own WAL flush, so on a
-- hot SKU confirms serve one flush at a time. A batch of N orders holds the row once, updates it
-- once by the batch's total and pays one flush.
--
-- Each order of the batch is decided on its own, exactly as Engine.Confirm decides it (one row per
-- order in the result, its kind):
--   'none'       the order holds no reservation at all;
--   'not_active' some of its reservations were released (expiry, a seller shortfall, a cancel):
--                its ACTIVE ones are released too and nothing of it is confirmed (released: how
--                many were released before);
--   'already'    nothing of it is ACTIVE and nothing released: a repeat of a confirm that
--                succeeded, which changes nothing;
--   'confirmed'  all of its reservations go ACTIVE → CONFIRMED (reservations: how many).
-- One order's verdict never changes another's.
--
-- Order of work, which is also the lock order of every path (reservations, then inventory rows):
-- 1. the orders' reservations, locked in (order_id, sku_id, warehouse_id) order;
-- 2. the inventory rows of the reservations to confirm or release, locked in (sku_id,
--    warehouse_id) order;
-- 3. the released orders' rest goes back (reserved falls), as ReleaseReservations does;
-- 4. the confirmed reservations are stamped and each inventory row's on_hand and reserved fall
--    once by the batch's units on it (one SALE entry in the stock ledger per row).
--
-- confirmed_at is clock_timestamp() read once the inventory rows are held, not the statement's
-- start: the statement may have waited for a row that a seller report held, and the stamp must be
-- later than that report's commit (SoldAfterCount in inventory/internal/stockstore/queries/
-- inventory.sql), as the one-order path's stamp is.
--
-- lock_timeout: as for reserve_orders (00006), a batch must not wait long for a row another
-- transaction holds while every later confirm of its SKUs waits behind it. After 2 s it fails as a
-- whole, having written nothing, and its orders are confirmed again each alone.
-- +goose StatementBegin
CREATE FUNCTION confirm_orders(p_order_ids BIGINT[])
RETURNS TABLE (order_id BIGINT, kind TEXT, reservations INT, released INT)
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
#variable_conflict use_column
DECLARE
    l_id     BIGINT[];
    l_order  BIGINT[];
    l_status TEXT[];
    c_ids    BIGINT[];
    x_ids    BIGINT[];
    c_order  BIGINT[];
    c_count  INT[];
    v_now    TIMESTAMPTZ;
BEGIN
    IF coalesce(array_length(p_order_ids, 1), 0) = 0 THEN
        RETURN;
    END IF;

    SELECT coalesce(array_agg(lk.id ORDER BY lk.order_id, lk.sku_id, lk.warehouse_id), '{}'),
           coalesce(array_agg(lk.order_id ORDER BY lk.order_id, lk.sku_id, lk.warehouse_id), '{}'),
           coalesce(array_agg(lk.status::TEXT ORDER BY lk.order_id, lk.sku_id, lk.warehouse_id), '{}')
    INTO l_id, l_order, l_status
    FROM (SELECT r.id, r.order_id, r.sku_id, r.warehouse_id, r.status
          FROM stock_reservations r
          WHERE r.order_id = ANY (p_order_ids)
          ORDER BY r.order_id, r.sku_id, r.warehouse_id
          FOR UPDATE) AS lk;

    -- Each order's verdict on its locked rows; the ACTIVE ones to confirm (no row released) or to
    -- release (some released).
    WITH rows AS (
        SELECT u.id, u.o, u.s FROM unnest(l_id, l_order, l_status) AS u (id, o, s)
    ), per AS (
        SELECT rows.o, count(*) FILTER (WHERE rows.s = 'RELEASED') AS rel FROM rows GROUP BY rows.o
    )
    SELECT coalesce(array_agg(rows.id) FILTER (WHERE rows.s = 'ACTIVE' AND per.rel = 0), '{}'),
           coalesce(array_agg(rows.id) FILTER (WHERE rows.s = 'ACTIVE' AND per.rel > 0), '{}')
    INTO c_ids, x_ids
    FROM rows JOIN per ON per.o = rows.o;

    IF cardinality(c_ids) + cardinality(x_ids) > 0 THEN
        PERFORM 1
        FROM inventory i
        JOIN (SELECT DISTINCT r.sku_id, r.warehouse_id
              FROM stock_reservations r
              WHERE r.id = ANY (c_ids || x_ids)) AS k
          ON i.sku_id = k.sku_id AND i.warehouse_id = k.warehouse_id
        ORDER BY i.sku_id, i.warehouse_id
        FOR UPDATE OF i;
    END IF;

    IF cardinality(x_ids) > 0 THEN
        WITH t AS (
            UPDATE stock_reservations r
               SET status = 'RELEASED'
             WHERE r.id = ANY (x_ids) AND r.status = 'ACTIVE'
            RETURNING r.sku_id, r.warehouse_id, r.quantity
        ), agg AS (
            SELECT t.sku_id, t.warehouse_id, sum(t.quantity)::INT AS qty FROM t GROUP BY t.sku_id, t.warehouse_id
        )
        UPDATE inventory i
           SET reserved = i.reserved - agg.qty, version = i.version + 1
          FROM agg
         WHERE i.sku_id = agg.sku_id AND i.warehouse_id = agg.warehouse_id;
    END IF;

    c_order := '{}';
    c_count := '{}';
    IF cardinality(c_ids) > 0 THEN
        v_now := clock_timestamp();
        WITH t AS (
            UPDATE stock_reservations r
               SET status = 'CONFIRMED', confirmed_at = v_now
             WHERE r.id = ANY (c_ids) AND r.status = 'ACTIVE'
            RETURNING r.order_id, r.sku_id, r.warehouse_id, r.quantity
        ), agg AS (
            SELECT t.sku_id, t.warehouse_id, sum(t.quantity)::INT AS qty FROM t GROUP BY t.sku_id, t.warehouse_id
        ), inv AS (
            UPDATE inventory i
               SET on_hand = i.on_hand - agg.qty, reserved = i.reserved - agg.qty, version = i.version + 1
              FROM agg
             WHERE i.sku_id = agg.sku_id AND i.warehouse_id = agg.warehouse_id
            RETURNING i.sku_id
        ), per AS (
            SELECT t.order_id AS o, count(*)::INT AS n FROM t GROUP BY t.order_id
        )
        SELECT coalesce(array_agg(per.o), '{}'), coalesce(array_agg(per.n), '{}')
        INTO c_order, c_count
        FROM per;
    END IF;

    RETURN QUERY
        WITH rows AS (
            SELECT u.o, u.s FROM unnest(l_order, l_status) AS u (o, s)
        ), per AS (
            SELECT rows.o, count(*) FILTER (WHERE rows.s = 'RELEASED')::INT AS rel FROM rows GROUP BY rows.o
        ), done AS (
            SELECT d.o, d.n FROM unnest(c_order, c_count) AS d (o, n)
        )
        SELECT o.id,
               CASE WHEN per.o IS NULL THEN 'none'
                    WHEN per.rel > 0 THEN 'not_active'
                    WHEN done.o IS NULL THEN 'already'
                    ELSE 'confirmed' END,
               coalesce(done.n, 0),
               coalesce(per.rel, 0)
        FROM (SELECT DISTINCT u.id FROM unnest(p_order_ids) AS u (id)) AS o
        LEFT JOIN per ON per.o = o.id
        LEFT JOIN done ON done.o = o.id
        ORDER BY o.id;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION confirm_orders(BIGINT[]);
