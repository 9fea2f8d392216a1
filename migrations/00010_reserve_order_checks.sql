-- +goose Up

-- reserve_order, as in 00005, with two changes that keep it exact and in lock order:
-- * A split that comes up short of its line (the stock moved between summing the warehouses and
--   choosing among them, each query seeing its own moment) fails with CK001, and the caller
--   chooses again, instead of reserving less than the line asked for.
-- * The one-line fast path reads the nearest warehouse that can serve the line first, then
--   reserves on that row alone. If the row was taken meanwhile (the UPDATE waited for it and then
--   found too little), it fails with CK001 instead of going on to another warehouse: the UPDATE
--   may still hold that row's lock, and locking a row of a lower warehouse after it could deadlock
--   with a transaction that locks the SKU's rows in (sku_id, warehouse_id) order (a combined
--   batch, a split, the sweeper).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reserve_order(p_order_id BIGINT, p_sku_ids BIGINT[], p_quantities INT[],
                              p_lat DOUBLE PRECISION, p_lon DOUBLE PRECISION, p_hold_seconds DOUBLE PRECISION)
RETURNS TABLE (kind TEXT, reservation_id BIGINT, sku_id BIGINT, warehouse_id INT, quantity INT,
               status VARCHAR, expires_at TIMESTAMPTZ, available INT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    expires  TIMESTAMPTZ := now() + make_interval(secs => p_hold_seconds);
    a_sku    BIGINT[] := '{}';
    a_wh     INT[] := '{}';
    a_qty    INT[] := '{}';
    i        INT;
    n_short  INT := 0;
    left_qty INT;
    total    INT;
    chosen   INT;
    c        RECORD;
BEGIN
    PERFORM pg_advisory_xact_lock(1, mod(p_order_id, 2147483647)::INT);
    IF EXISTS (SELECT 1 FROM stock_reservations r WHERE r.order_id = p_order_id) THEN
        RETURN QUERY
            SELECT 'existing', r.id, r.sku_id, r.warehouse_id, r.quantity, r.status, r.expires_at, NULL::INT
            FROM stock_reservations r
            WHERE r.order_id = p_order_id
            ORDER BY r.sku_id, r.warehouse_id;
        RETURN;
    END IF;

    -- One line (the common order): the nearest warehouse that can serve it all, then one
    -- conditional UPDATE of that row. When no single warehouse can serve it, the general path
    -- below decides (split or short).
    IF array_length(p_sku_ids, 1) = 1 THEN
        SELECT near.warehouse_id INTO chosen
        FROM inventory near JOIN warehouses w ON w.id = near.warehouse_id
        WHERE near.sku_id = p_sku_ids[1] AND near.on_hand - near.reserved >= p_quantities[1]
        ORDER BY distance_km(p_lat, p_lon, w.lat, w.lon), near.warehouse_id
        LIMIT 1;
        IF FOUND THEN
            UPDATE inventory inv
               SET reserved = inv.reserved + p_quantities[1], version = inv.version + 1
             WHERE inv.sku_id = p_sku_ids[1] AND inv.warehouse_id = chosen
               AND inv.on_hand - inv.reserved >= p_quantities[1];
            IF NOT FOUND THEN
                -- Taken meanwhile. The UPDATE may have waited for the row and still holds its
                -- lock: going on to another warehouse of the SKU here could lock rows out of
                -- (sku_id, warehouse_id) order, so roll back (dropping the lock) and choose again.
                RAISE EXCEPTION 'stock moved under sku %', p_sku_ids[1] USING ERRCODE = 'CK001';
            END IF;
            INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at)
            VALUES (p_order_id, p_sku_ids[1], chosen, p_quantities[1], expires)
            RETURNING id INTO reservation_id;
            kind := 'reserved'; sku_id := p_sku_ids[1]; warehouse_id := chosen; quantity := p_quantities[1];
            status := 'ACTIVE'; expires_at := expires; available := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;

    -- Choose warehouses (reads only).
    FOR i IN 1 .. coalesce(array_length(p_sku_ids, 1), 0) LOOP
        SELECT inv.warehouse_id INTO chosen
        FROM inventory inv JOIN warehouses w ON w.id = inv.warehouse_id
        WHERE inv.sku_id = p_sku_ids[i] AND inv.on_hand - inv.reserved >= p_quantities[i]
        ORDER BY distance_km(p_lat, p_lon, w.lat, w.lon), inv.warehouse_id
        LIMIT 1;
        IF FOUND THEN
            a_sku := a_sku || p_sku_ids[i];
            a_wh := a_wh || chosen;
            a_qty := a_qty || p_quantities[i];
            CONTINUE;
        END IF;
        SELECT coalesce(sum(inv.on_hand - inv.reserved), 0)::INT INTO total
        FROM inventory inv
        WHERE inv.sku_id = p_sku_ids[i] AND inv.on_hand > inv.reserved;
        IF total < p_quantities[i] THEN
            n_short := n_short + 1;
            kind := 'short'; reservation_id := NULL; sku_id := p_sku_ids[i]; warehouse_id := NULL;
            quantity := p_quantities[i]; status := NULL; expires_at := NULL; available := total;
            RETURN NEXT;
            CONTINUE;
        END IF;
        left_qty := p_quantities[i];
        FOR c IN
            SELECT inv.warehouse_id AS wh, (inv.on_hand - inv.reserved) AS avail
            FROM inventory inv JOIN warehouses w ON w.id = inv.warehouse_id
            WHERE inv.sku_id = p_sku_ids[i] AND inv.on_hand > inv.reserved
            ORDER BY distance_km(p_lat, p_lon, w.lat, w.lon), inv.warehouse_id
        LOOP
            a_sku := a_sku || p_sku_ids[i];
            a_wh := a_wh || c.wh;
            a_qty := a_qty || least(left_qty, c.avail);
            left_qty := left_qty - least(left_qty, c.avail);
            EXIT WHEN left_qty = 0;
        END LOOP;
        IF left_qty > 0 THEN
            -- The stock moved between the total and the split (each query sees its own moment):
            -- choose again rather than reserve less than the line.
            RAISE EXCEPTION 'stock moved under sku %', p_sku_ids[i] USING ERRCODE = 'CK001';
        END IF;
    END LOOP;
    IF n_short > 0 THEN
        RETURN;
    END IF;

    -- Reserve, in lock order (sorting is only needed when there is more than one allocation).
    IF array_length(a_sku, 1) > 1 THEN
        SELECT array_agg(x.s ORDER BY x.s, x.w), array_agg(x.w ORDER BY x.s, x.w), array_agg(x.q ORDER BY x.s, x.w)
        INTO a_sku, a_wh, a_qty
        FROM unnest(a_sku, a_wh, a_qty) AS x (s, w, q);
    END IF;
    FOR i IN 1 .. array_length(a_sku, 1) LOOP
        UPDATE inventory inv
           SET reserved = inv.reserved + a_qty[i], version = inv.version + 1
         WHERE inv.sku_id = a_sku[i] AND inv.warehouse_id = a_wh[i]
           AND inv.on_hand - inv.reserved >= a_qty[i];
        IF NOT FOUND THEN
            RAISE EXCEPTION 'stock moved under sku % warehouse %', a_sku[i], a_wh[i] USING ERRCODE = 'CK001';
        END IF;
        INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at)
        VALUES (p_order_id, a_sku[i], a_wh[i], a_qty[i], expires)
        RETURNING id INTO reservation_id;
        kind := 'reserved'; sku_id := a_sku[i]; warehouse_id := a_wh[i]; quantity := a_qty[i];
        status := 'ACTIVE'; expires_at := expires; available := NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- Nothing to undo: both checks only refuse what was never right, or ask for a retry.
