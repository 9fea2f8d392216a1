-- +goose Up

-- reserve_orders, as in 00006, deciding the common batch in one statement. Once the batch's rows
-- are locked (step 3), if every line's nearest row holds enough for all the lines whose nearest
-- row it is, deciding the orders one after another (step 4) gives every line its nearest row: no
-- earlier order of the batch can have taken what a later line needs there. So the batch is
-- decided by one query (each line's nearest row, each row's total) instead of order by order in
-- PL/pgSQL; a batch that does not fit so (a row short for its lines, a line with no row, a line
-- to split) is decided order by order as before. The result is the same either way; on a hot SKU
-- at 100 orders a batch, the function's time outside its INSERT falls by about a quarter.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reserve_orders(p_order_ids BIGINT[], p_lats DOUBLE PRECISION[], p_lons DOUBLE PRECISION[],
                               p_hold_seconds DOUBLE PRECISION[], p_line_orders INT[], p_sku_ids BIGINT[],
                               p_quantities INT[])
RETURNS TABLE (order_id BIGINT, kind TEXT, reservation_id BIGINT, sku_id BIGINT, warehouse_id INT,
               quantity INT, status VARCHAR, expires_at TIMESTAMPTZ, available INT)
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
#variable_conflict use_column
DECLARE
    n_orders INT := coalesce(array_length(p_order_ids, 1), 0);
    n_lines  INT := coalesce(array_length(p_sku_ids, 1), 0);
    o_skip   BOOLEAN[];
    held     BIGINT[];
    -- The locked rows, in key order: key, sellable units left, units this batch adds.
    r_sku    BIGINT[];
    r_wh     INT[];
    r_avail  INT[];
    r_delta  INT[];
    -- Each line's candidate rows, nearest first: c_row[c_first[l] .. c_first[l + 1] - 1].
    c_row    INT[];
    c_line   INT[];
    c_first  INT[];
    -- This order's allocations while it is being decided: line, row, units.
    p_line   INT[];
    p_row    INT[];
    p_qty    INT[];
    -- What the batch writes.
    a_order  BIGINT[] := '{}';
    a_sku    BIGINT[] := '{}';
    a_wh     INT[] := '{}';
    a_qty    INT[] := '{}';
    a_exp    TIMESTAMPTZ[] := '{}';
    k        INT;
    l        INT;
    l_end    INT;
    ci       INT;
    j        INT;
    ok       BOOLEAN;
    chosen   INT;
    total    INT;
    left_qty INT;
    take     INT;
    n_open   INT;
    fits     BOOLEAN;
BEGIN
    IF n_orders = 0 THEN
        RETURN;
    END IF;

    PERFORM pg_advisory_xact_lock(1, x.key)
    FROM (SELECT DISTINCT mod(o, 2147483647)::INT AS key FROM unnest(p_order_ids) AS o ORDER BY 1) AS x;

    SELECT coalesce(array_agg(DISTINCT r.order_id), '{}') INTO held
    FROM stock_reservations r
    WHERE r.order_id = ANY (p_order_ids);
    o_skip := array_fill(false, ARRAY[n_orders]);
    IF cardinality(held) > 0 THEN
        FOR k IN 1 .. n_orders LOOP
            o_skip[k] := p_order_ids[k] = ANY (held);
        END LOOP;
        RETURN QUERY
            SELECT r.order_id, 'existing'::TEXT, r.id, r.sku_id, r.warehouse_id, r.quantity, r.status,
                   r.expires_at, NULL::INT
            FROM stock_reservations r
            WHERE r.order_id = ANY (held)
            ORDER BY r.order_id, r.sku_id, r.warehouse_id;
    END IF;

    -- Lock every candidate row of the lines still to decide, in key order.
    SELECT coalesce(array_agg(lk.sku_id ORDER BY lk.sku_id, lk.warehouse_id), '{}'),
           coalesce(array_agg(lk.warehouse_id ORDER BY lk.sku_id, lk.warehouse_id), '{}'),
           coalesce(array_agg(lk.on_hand - lk.reserved ORDER BY lk.sku_id, lk.warehouse_id), '{}')
    INTO r_sku, r_wh, r_avail
    FROM (SELECT inv.sku_id, inv.warehouse_id, inv.on_hand, inv.reserved
          FROM inventory inv
          WHERE inv.sku_id = ANY (ARRAY(SELECT DISTINCT ln.s
                                        FROM unnest(p_sku_ids, p_line_orders) AS ln (s, o)
                                        WHERE NOT o_skip[ln.o]))
          ORDER BY inv.sku_id, inv.warehouse_id
          FOR UPDATE) AS lk;

    -- The common batch: every line's nearest row holds enough for all the lines whose nearest row
    -- it is. Deciding the orders one after another would then give every line its nearest row
    -- (no earlier order can have taken what a later line needs there), so the batch is decided in
    -- one statement instead of order by order. Otherwise the orders are decided one by one below.
    SELECT count(*) INTO n_open FROM unnest(p_line_orders) AS o WHERE NOT o_skip[o];
    WITH near AS (
        SELECT DISTINCT ON (ln.li) ln.li, ln.o, ln.q, rw.ri
        FROM unnest(p_sku_ids, p_line_orders, p_quantities) WITH ORDINALITY AS ln (s, o, q, li)
        JOIN unnest(r_sku, r_wh) WITH ORDINALITY AS rw (s, wh, ri) ON rw.s = ln.s
        JOIN warehouses w ON w.id = rw.wh
        WHERE NOT o_skip[ln.o]
        ORDER BY ln.li, distance_km(p_lats[ln.o], p_lons[ln.o], w.lat, w.lon), rw.wh
    ), per_row AS (
        SELECT near.ri, sum(near.q)::INT AS q FROM near GROUP BY near.ri
    )
    SELECT a.n = n_open AND NOT EXISTS (SELECT 1 FROM per_row WHERE per_row.q > r_avail[per_row.ri]),
           (SELECT array_agg(coalesce(per_row.q, 0) ORDER BY rw.ri)
              FROM generate_subscripts(r_sku, 1) AS rw (ri) LEFT JOIN per_row ON per_row.ri = rw.ri),
           a.o, a.s, a.w, a.q, a.e
    FROM (SELECT count(*) AS n, coalesce(array_agg(p_order_ids[near.o]), '{}') AS o,
                 coalesce(array_agg(r_sku[near.ri]), '{}') AS s, coalesce(array_agg(r_wh[near.ri]), '{}') AS w,
                 coalesce(array_agg(near.q), '{}') AS q,
                 coalesce(array_agg(now() + make_interval(secs => p_hold_seconds[near.o])), '{}') AS e
          FROM near) AS a
    INTO fits, r_delta, a_order, a_sku, a_wh, a_qty, a_exp;
    IF NOT fits THEN
        a_order := '{}'; a_sku := '{}'; a_wh := '{}'; a_qty := '{}'; a_exp := '{}';
        r_delta := array_fill(0, ARRAY[greatest(cardinality(r_sku), 1)]);
        -- Candidates of each line, nearest to its order's ship-to first (ties: lower warehouse id).
        SELECT coalesce(array_agg(c.ri ORDER BY c.li, c.d, c.wh), '{}'),
               coalesce(array_agg(c.li ORDER BY c.li, c.d, c.wh), '{}')
        INTO c_row, c_line
        FROM (SELECT ln.li::INT AS li, rw.ri::INT AS ri, rw.wh,
                     distance_km(p_lats[ln.o], p_lons[ln.o], w.lat, w.lon) AS d
              FROM unnest(p_sku_ids, p_line_orders) WITH ORDINALITY AS ln (s, o, li)
              JOIN unnest(r_sku, r_wh) WITH ORDINALITY AS rw (s, wh, ri) ON rw.s = ln.s
              JOIN warehouses w ON w.id = rw.wh
              WHERE NOT o_skip[ln.o]) AS c;
        c_first := array_fill(0, ARRAY[n_lines + 1]);
        j := 1;
        FOR l IN 1 .. n_lines + 1 LOOP
            WHILE j <= cardinality(c_line) AND c_line[j] < l LOOP
                j := j + 1;
            END LOOP;
            c_first[l] := j;
        END LOOP;

        l := 1;
        FOR k IN 1 .. n_orders LOOP
            l_end := l;
            WHILE l_end <= n_lines AND p_line_orders[l_end] = k LOOP
                l_end := l_end + 1;
            END LOOP;
            IF o_skip[k] OR l = l_end THEN
                l := l_end;
                CONTINUE;
            END IF;
            -- Decide every line on the locked figures; an order's lines have distinct SKUs, so they
            -- use distinct rows and can be decided before any is applied.
            ok := true;
            p_line := '{}'; p_row := '{}'; p_qty := '{}';
            FOR li IN l .. l_end - 1 LOOP
                chosen := 0;
                FOR ci IN c_first[li] .. c_first[li + 1] - 1 LOOP
                    IF r_avail[c_row[ci]] >= p_quantities[li] THEN
                        chosen := c_row[ci];
                        EXIT;
                    END IF;
                END LOOP;
                IF chosen > 0 THEN
                    p_line := p_line || li; p_row := p_row || chosen; p_qty := p_qty || p_quantities[li];
                    CONTINUE;
                END IF;
                total := 0;
                FOR ci IN c_first[li] .. c_first[li + 1] - 1 LOOP
                    total := total + greatest(r_avail[c_row[ci]], 0);
                END LOOP;
                IF total < p_quantities[li] THEN
                    ok := false;
                    order_id := p_order_ids[k]; kind := 'short'; reservation_id := NULL; sku_id := p_sku_ids[li];
                    warehouse_id := NULL; quantity := p_quantities[li]; status := NULL; expires_at := NULL;
                    available := total;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                left_qty := p_quantities[li];
                FOR ci IN c_first[li] .. c_first[li + 1] - 1 LOOP
                    take := least(left_qty, greatest(r_avail[c_row[ci]], 0));
                    IF take > 0 THEN
                        p_line := p_line || li; p_row := p_row || c_row[ci]; p_qty := p_qty || take;
                        left_qty := left_qty - take;
                    END IF;
                    EXIT WHEN left_qty = 0;
                END LOOP;
            END LOOP;
            IF ok THEN
                FOR j IN 1 .. coalesce(array_length(p_row, 1), 0) LOOP
                    r_avail[p_row[j]] := r_avail[p_row[j]] - p_qty[j];
                    r_delta[p_row[j]] := r_delta[p_row[j]] + p_qty[j];
                    a_order := a_order || p_order_ids[k];
                    a_sku := a_sku || r_sku[p_row[j]];
                    a_wh := a_wh || r_wh[p_row[j]];
                    a_qty := a_qty || p_qty[j];
                    a_exp := a_exp || (now() + make_interval(secs => p_hold_seconds[k]));
                END LOOP;
            END IF;
            l := l_end;
        END LOOP;
    END IF;

    IF cardinality(a_order) = 0 THEN
        RETURN;
    END IF;
    -- The rows are held since step 3 and every delta fits in what was sellable there, so these
    -- statements neither wait nor fail the check constraints.
    UPDATE inventory inv
       SET reserved = inv.reserved + d.q, version = inv.version + 1
      FROM unnest(r_sku, r_wh, r_delta) AS d (s, w, q)
     WHERE d.q > 0 AND inv.sku_id = d.s AND inv.warehouse_id = d.w;
    RETURN QUERY
        WITH ins AS (
            INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at)
            SELECT * FROM unnest(a_order, a_sku, a_wh, a_qty, a_exp)
            RETURNING stock_reservations.id, stock_reservations.order_id, stock_reservations.sku_id,
                      stock_reservations.warehouse_id, stock_reservations.quantity,
                      stock_reservations.status, stock_reservations.expires_at
        )
        SELECT ins.order_id, 'reserved'::TEXT, ins.id, ins.sku_id, ins.warehouse_id, ins.quantity, ins.status,
               ins.expires_at, NULL::INT
        FROM ins
        ORDER BY ins.order_id, ins.sku_id, ins.warehouse_id;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- Nothing to undo: 00006's body decides every batch as this one does.
