-- name: ReservationsOfOrder :many
SELECT id, order_id, sku_id, warehouse_id, quantity, status, expires_at, created_at, cancelled_quantity,
       restocked_quantity
FROM stock_reservations
WHERE order_id = $1
ORDER BY sku_id, warehouse_id;

-- name: LockReservationsOfOrder :many
SELECT id, sku_id, warehouse_id, quantity, status, expires_at
FROM stock_reservations
WHERE order_id = $1
ORDER BY sku_id, warehouse_id
FOR UPDATE;

-- name: LockInventoryRows :exec
SELECT 1
FROM inventory i
JOIN (SELECT unnest(@sku_ids::bigint[]) AS sku_id, unnest(@warehouse_ids::int[]) AS warehouse_id) k
  ON i.sku_id = k.sku_id AND i.warehouse_id = k.warehouse_id
ORDER BY i.sku_id, i.warehouse_id
FOR UPDATE OF i;

-- name: ConfirmReservations :many
-- ACTIVE → CONFIRMED: the units leave the warehouse, so on_hand and reserved both decrease.
-- The caller holds the inventory rows (LockInventoryRows) when this statement starts, so
-- confirmed_at is later than the commit of any seller report that held one of them: see
-- SoldAfterCount. The combined path (ConfirmOrders) keeps the same order and stamp.
WITH t AS (
    UPDATE stock_reservations
       SET status = 'CONFIRMED', confirmed_at = statement_timestamp()
     WHERE id = ANY (@ids::bigint[]) AND status = 'ACTIVE'
    RETURNING sku_id, warehouse_id, quantity
), agg AS (
    SELECT sku_id, warehouse_id, sum(quantity)::int AS qty FROM t GROUP BY sku_id, warehouse_id
)
UPDATE inventory i
   SET on_hand = i.on_hand - agg.qty, reserved = i.reserved - agg.qty, version = i.version + 1
  FROM agg
 WHERE i.sku_id = agg.sku_id AND i.warehouse_id = agg.warehouse_id
RETURNING i.sku_id, i.warehouse_id, agg.qty;

-- name: ReleaseReservations :many
-- ACTIVE → RELEASED: the units become sellable again.
WITH t AS (
    UPDATE stock_reservations
       SET status = 'RELEASED'
     WHERE id = ANY (@ids::bigint[]) AND status = 'ACTIVE'
    RETURNING order_id, sku_id, warehouse_id, quantity
), agg AS (
    SELECT sku_id, warehouse_id, sum(quantity)::int AS qty FROM t GROUP BY sku_id, warehouse_id
), inv AS (
    UPDATE inventory i
       SET reserved = i.reserved - agg.qty, version = i.version + 1
      FROM agg
     WHERE i.sku_id = agg.sku_id AND i.warehouse_id = agg.warehouse_id
    RETURNING i.sku_id
)
SELECT t.order_id, t.sku_id, t.warehouse_id, t.quantity FROM t;

-- name: ClaimExpiredReservations :many
-- The sweeper's batch. SKIP LOCKED lets several sweepers share the work without waiting on one
-- another, and skips reservations a confirm or release is moving right now.
SELECT id, order_id, sku_id, warehouse_id, quantity, expires_at
FROM stock_reservations
WHERE status = 'ACTIVE' AND expires_at < now()
ORDER BY expires_at
LIMIT @batch_size
FOR UPDATE SKIP LOCKED;

-- name: SweeperLag :one
-- How long the oldest expired, still ACTIVE reservation has waited for release (0 when none).
SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(expires_at)), 0)::float8 AS lag_seconds,
       count(*) AS expired
FROM stock_reservations
WHERE status = 'ACTIVE' AND expires_at < now();

-- name: CountActiveReservations :one
SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE';

-- name: CreateInventoryRow :execrows
-- A first stock report for a (sku, warehouse); a concurrent first report wins, and this one then
-- goes through the update path below.
INSERT INTO inventory (sku_id, warehouse_id, on_hand, reported_quantity, source_updated_at)
VALUES (@sku_id, @warehouse_id, @on_hand, @on_hand, @source_updated_at)
ON CONFLICT (sku_id, warehouse_id) DO NOTHING;

-- name: LockInventoryRow :one
SELECT on_hand, reserved, source_updated_at
FROM inventory
WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id
FOR UPDATE;

-- name: NewestActiveReservationsOfRow :many
-- The caller holds the inventory row, so it must not wait on reservation rows: SKIP LOCKED.
SELECT id, order_id, quantity
FROM stock_reservations
WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id AND status = 'ACTIVE'
ORDER BY created_at DESC, id DESC
FOR UPDATE SKIP LOCKED;

-- name: SoldAfterCount :one
-- Units of the row sold after a seller counted it at @counted_at: CONFIRMED with confirmed_at
-- after that instant (a restocked order's units, and units a line cancellation put back, are
-- back on the shelf and no longer count).
--
-- It runs after LockInventoryRow, in the report's transaction: under READ COMMITTED this
-- statement's snapshot is taken once the row lock is granted, so every confirm of the row that
-- committed before is seen here (one statement with the lock would read with the snapshot taken
-- before waiting for it, and miss a confirm that committed meanwhile). A confirm of the row
-- whose transaction commits after this read is one that waits for the row: it moves its units off
-- on_hand only after the report committed, from the count the report set, so the report must not
-- take them off too; and its confirmed_at, taken after it got the row, is later than the report,
-- so later reports judge it by that instant. Such a confirm counts as after the report, whatever
-- the report's stamp says: a seller cannot have counted out a sale that was not yet made.
SELECT coalesce(sum(quantity - restocked_quantity), 0)::int AS sold
FROM stock_reservations
WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id AND status = 'CONFIRMED'
  AND confirmed_at > @counted_at::timestamptz;

-- name: SetOnHand :execrows
-- Seller stock sets on_hand only; an update older than the last applied one changes nothing.
-- on_hand is the seller's count less the units sold after its stamp (SoldAfterCount), clamped at
-- zero; the count as sent and that difference stay on the row and in its ledger entry.
UPDATE inventory
   SET on_hand = greatest(sqlc.arg(reported_quantity)::int - sqlc.arg(sold_after_report)::int, 0),
       reported_quantity = sqlc.arg(reported_quantity)::int, sold_after_report = sqlc.arg(sold_after_report)::int,
       source_updated_at = @source_updated_at, version = version + 1
 WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id
   AND (source_updated_at IS NULL OR source_updated_at < @source_updated_at);

-- name: InsertShortfallEvent :exec
INSERT INTO seller_shortfall_events
    (seller_id, sku_id, warehouse_id, on_hand_before, on_hand_after, reserved_before,
     released_units, order_ids, source_updated_at)
VALUES (@seller_id, @sku_id, @warehouse_id, @on_hand_before, @on_hand_after, @reserved_before,
        @released_units, @order_ids::bigint[], @source_updated_at);

-- name: FindInventoryDrift :many
-- Rows whose reserved differs from the sum of their ACTIVE reservations.
SELECT i.sku_id, i.warehouse_id, i.on_hand, i.reserved, COALESCE(a.qty, 0)::int AS active_sum
FROM inventory i
LEFT JOIN (
    SELECT sku_id, warehouse_id, sum(quantity) AS qty
    FROM stock_reservations
    WHERE status = 'ACTIVE'
    GROUP BY sku_id, warehouse_id
) a ON a.sku_id = i.sku_id AND a.warehouse_id = i.warehouse_id
WHERE i.reserved <> COALESCE(a.qty, 0)
ORDER BY i.sku_id, i.warehouse_id;

-- name: ActiveSumOfRow :one
SELECT COALESCE(sum(quantity), 0)::int
FROM stock_reservations
WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id AND status = 'ACTIVE';

-- name: SetReserved :exec
UPDATE inventory
   SET reserved = @reserved, version = version + 1
 WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id;

-- name: InsertDriftEvent :exec
INSERT INTO inventory_drift_events (sku_id, warehouse_id, reserved_before, active_sum, released_units)
VALUES (@sku_id, @warehouse_id, @reserved_before, @active_sum, @released_units);

-- name: GetInventoryRow :one
SELECT sku_id, warehouse_id, on_hand, reserved, version, source_updated_at
FROM inventory
WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id;

-- name: MarkReservationsReleased :many
-- Status only, for the reconciler, which sets reserved itself from the recomputed sum.
UPDATE stock_reservations
   SET status = 'RELEASED'
 WHERE id = ANY (@ids::bigint[]) AND status = 'ACTIVE'
RETURNING id, order_id, quantity;

-- name: UnconfirmReservations :many
-- CONFIRMED → RELEASED for an order that will not be fulfilled after all (its capture was
-- refused and support cancelled it): the units go back on the shelf (those a line cancellation
-- already put back are not put back twice). confirmed_at stays; the auditor reads both instants.
WITH t AS (
    UPDATE stock_reservations
       SET status = 'RELEASED', restocked_at = statement_timestamp()
     WHERE id = ANY (@ids::bigint[]) AND status = 'CONFIRMED'
    RETURNING sku_id, warehouse_id, quantity - restocked_quantity AS quantity
), agg AS (
    SELECT sku_id, warehouse_id, sum(quantity)::int AS qty FROM t GROUP BY sku_id, warehouse_id
)
UPDATE inventory i
   SET on_hand = i.on_hand + agg.qty, version = i.version + 1
  FROM agg
 WHERE i.sku_id = agg.sku_id AND i.warehouse_id = agg.warehouse_id
RETURNING i.sku_id, i.warehouse_id, agg.qty;

-- name: ReserveOrder :many
-- All of an order's lines or none, warehouses chosen by distance, in one statement (see
-- migrations/00005_reserve_function.sql for the rules it runs). The same statement records the
-- hold's end on the order (its ACTIVE reservations' expiry), so the order says when its hold ends
-- from the commit that made it; a repeat writes the same end again, or nothing.
WITH r AS MATERIALIZED (
    SELECT f.kind::text AS kind, coalesce(f.reservation_id, 0)::bigint AS reservation_id,
           f.sku_id::bigint AS sku_id, coalesce(f.warehouse_id, 0)::int AS warehouse_id,
           f.quantity::int AS quantity, coalesce(f.status, '')::text AS status,
           coalesce(f.expires_at, 'epoch')::timestamptz AS expires_at, coalesce(f.available, 0)::int AS available
    FROM reserve_order(@order_id::bigint, @sku_ids::bigint[], @quantities::int[], @lat::float8, @lon::float8,
                       @hold_seconds::float8) f
), held AS (
    UPDATE orders o SET hold_expires_at = h.until, updated_at = now()
      FROM (SELECT max(r.expires_at) AS until FROM r WHERE r.kind <> 'short' AND r.status = 'ACTIVE') h
     WHERE o.id = @order_id::bigint AND h.until IS NOT NULL AND o.hold_expires_at IS DISTINCT FROM h.until
)
SELECT r.kind, r.reservation_id, r.sku_id, r.warehouse_id, r.quantity, r.status, r.expires_at, r.available FROM r;

-- name: ReserveOrders :many
-- A batch of orders, each all-or-nothing on its own, in one transaction: the combining path (see
-- migrations/00006_reserve_orders_batch.sql for the rules it runs, and 00034 for how it decides the
-- common batch in one query).
-- Each order's hold's end is recorded on it in the same statement, as ReserveOrder does.
WITH r AS MATERIALIZED (
    SELECT f.order_id::bigint AS order_id, f.kind::text AS kind, coalesce(f.reservation_id, 0)::bigint AS reservation_id,
           f.sku_id::bigint AS sku_id, coalesce(f.warehouse_id, 0)::int AS warehouse_id, f.quantity::int AS quantity,
           coalesce(f.status, '')::text AS status, coalesce(f.expires_at, 'epoch')::timestamptz AS expires_at,
           coalesce(f.available, 0)::int AS available
    FROM reserve_orders(@order_ids::bigint[], @lats::float8[], @lons::float8[], @hold_seconds::float8[],
                        @line_orders::int[], @sku_ids::bigint[], @quantities::int[]) f
), held AS (
    UPDATE orders o SET hold_expires_at = h.until, updated_at = now()
      FROM (SELECT r.order_id, max(r.expires_at) AS until FROM r
             WHERE r.kind <> 'short' AND r.status = 'ACTIVE' GROUP BY r.order_id) h
     WHERE o.id = h.order_id AND o.hold_expires_at IS DISTINCT FROM h.until
)
SELECT r.order_id, r.kind, r.reservation_id, r.sku_id, r.warehouse_id, r.quantity, r.status, r.expires_at, r.available
FROM r;

-- name: ConfirmOrders :many
-- A batch of confirms, each order decided on its own, in one transaction: the combining path of
-- Confirm (see migrations/00033_confirm_orders_batch.sql for the rules it runs).
SELECT order_id::bigint AS order_id, kind::text AS kind, reservations::int AS reservations,
       released::int AS released
FROM confirm_orders(@order_ids::bigint[]);

-- name: Now :one
-- The database's clock, which decides every expiry.
SELECT now()::timestamptz AS now;

-- name: LockConfirmedReservationsOfLine :many
-- The CONFIRMED reservations one line of an order was served from, in warehouse order.
SELECT id, warehouse_id, quantity, cancelled_quantity
FROM stock_reservations
WHERE order_id = @order_id AND sku_id = @sku_id AND status = 'CONFIRMED'
ORDER BY warehouse_id
FOR UPDATE;

-- name: CancelReservedUnits :execrows
-- Units of a CONFIRMED reservation that left the order; they stay counted as sold (off the
-- shelf) until they are restocked.
UPDATE stock_reservations
   SET cancelled_quantity = cancelled_quantity + @units::int
 WHERE id = @id AND status = 'CONFIRMED' AND quantity - cancelled_quantity >= @units::int;

-- name: ClaimLineCancellationRestock :one
-- A cancellation's units go back on the shelf once: the first caller stamps the row.
UPDATE line_cancellations
   SET restocked_at = now(), updated_at = now()
 WHERE id = @id AND restocked_at IS NULL
RETURNING order_id, sku_id, reason, allocations;

-- name: RestockCancelledUnits :execrows
-- Cancelled units of a CONFIRMED reservation put back on the shelf: no longer counted as sold.
UPDATE stock_reservations
   SET restocked_quantity = restocked_quantity + @units::int
 WHERE order_id = @order_id AND sku_id = @sku_id AND warehouse_id = @warehouse_id AND status = 'CONFIRMED'
   AND cancelled_quantity - restocked_quantity >= @units::int;

-- name: PutUnitsBack :execrows
-- Units that never left the seller's shelf become sellable again (reserved unchanged: the
-- ledger records a RESTOCK).
UPDATE inventory
   SET on_hand = on_hand + @units::int, version = version + 1
 WHERE sku_id = @sku_id AND warehouse_id = @warehouse_id;
