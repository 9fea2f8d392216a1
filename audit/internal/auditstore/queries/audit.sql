-- name: AuditInventoryRows :many
-- The auditor's reads (audit/) run in one REPEATABLE READ, READ ONLY transaction and return only
-- what breaks an invariant, with a flag per invariant and the numbers to show.
-- Per (sku, warehouse): the inventory row, its ledger and its reservations, when any of them
-- disagree. supplied is the sum of SUPPLY entries; moved the sum of every other entry (our own
-- movements: sales, restocks, anything else). confirmed counts the units CONFIRMED reservations
-- took off the shelf, less those a line cancellation put back.
-- sold_since_count is what the seller's last count (the row's reported_quantity at its
-- source_updated_at) had to cover: units CONFIRMED after its stamp (or with no confirm time),
-- less units confirmed before it and restocked after it, which came back to the shelf. A row with
-- no stamp was counted before any sale, and one with no count is not judged.
WITH ledger AS (
    SELECT sku_id, warehouse_id, sum(delta)::bigint AS total,
           coalesce(sum(delta) FILTER (WHERE kind = 'SUPPLY'), 0)::bigint AS supplied,
           count(*)::bigint AS entries
    FROM inventory_ledger
    GROUP BY sku_id, warehouse_id
), res AS (
    SELECT r.sku_id, r.warehouse_id,
           coalesce(sum(r.quantity) FILTER (WHERE r.status = 'ACTIVE'), 0)::bigint AS active,
           coalesce(sum(r.quantity - r.restocked_quantity) FILTER (WHERE r.status = 'CONFIRMED'), 0)::bigint AS confirmed,
           coalesce(sum(r.quantity - r.restocked_quantity) FILTER (WHERE r.status = 'CONFIRMED' AND (i.source_updated_at IS NULL
               OR r.confirmed_at IS NULL OR r.confirmed_at > i.source_updated_at)), 0)::bigint
         - coalesce(sum(r.quantity) FILTER (WHERE r.status = 'RELEASED' AND r.confirmed_at <= i.source_updated_at
               AND r.restocked_at > i.source_updated_at), 0)::bigint AS sold_since_count
    FROM stock_reservations r
    LEFT JOIN inventory i ON i.sku_id = r.sku_id AND i.warehouse_id = r.warehouse_id
    GROUP BY r.sku_id, r.warehouse_id
), keys AS (
    SELECT sku_id, warehouse_id FROM inventory
    UNION SELECT sku_id, warehouse_id FROM ledger
    UNION SELECT sku_id, warehouse_id FROM res
), rows AS (
    SELECT k.sku_id, k.warehouse_id, i.sku_id IS NOT NULL AS row_exists,
           coalesce(i.on_hand, 0)::bigint AS on_hand, coalesce(i.reserved, 0)::bigint AS reserved,
           coalesce(l.total, 0)::bigint AS ledger_total, coalesce(l.supplied, 0)::bigint AS supplied,
           coalesce(l.total - l.supplied, 0)::bigint AS moved, coalesce(l.entries, 0)::bigint AS ledger_entries,
           coalesce(r.active, 0)::bigint AS active, coalesce(r.confirmed, 0)::bigint AS confirmed,
           i.reported_quantity AS counted, i.source_updated_at AS counted_at,
           coalesce(r.sold_since_count, 0)::bigint AS sold_since_count
    FROM keys k
    LEFT JOIN inventory i ON i.sku_id = k.sku_id AND i.warehouse_id = k.warehouse_id
    LEFT JOIN ledger l ON l.sku_id = k.sku_id AND l.warehouse_id = k.warehouse_id
    LEFT JOIN res r ON r.sku_id = k.sku_id AND r.warehouse_id = k.warehouse_id
), flagged AS (
    SELECT rows.*,
           (reserved > on_hand OR reserved < 0 OR on_hand < 0)::bool AS over_reserved,
           (reserved <> active)::bool AS reserved_drift,
           (ledger_total <> on_hand)::bool AS ledger_off,
           (-moved <> confirmed)::bool AS sales_off,
           coalesce(sold_since_count > counted, false)::bool AS oversold
    FROM rows
)
SELECT sku_id::bigint AS sku_id, warehouse_id::int AS warehouse_id, row_exists::bool AS row_exists,
       on_hand, reserved, ledger_total, supplied, moved, ledger_entries, active, confirmed,
       counted, counted_at, sold_since_count,
       over_reserved, reserved_drift, ledger_off, sales_off, oversold
FROM flagged
WHERE over_reserved OR reserved_drift OR ledger_off OR sales_off OR oversold
ORDER BY sku_id, warehouse_id;

-- name: AuditSettledOrders :many
-- Orders created since @since that reached a final status, a batch at a time (ids after @after,
-- at most @batch_size), with their stock and the product's record of their money: the payments
-- row. The provider's record (its intents) is not in this database; the auditor asks the provider
-- for it and judges the money in Go. unfulfilled and stock_kept judge the product's rows alone. An
-- order that failed or was cancelled less than @settle_seconds ago is not judged yet: the hold
-- child and the payment reconciler end an order first and then give its stock and money back. A
-- CONFIRMED order's money is judged against the units it keeps (ordered less cancelled after
-- payment), unless a line cancellation's refund is still under way (recorded less than
-- @settle_seconds ago) or waits for support (attention).
WITH scope AS (
    SELECT id, status, failure_code, total_minor, currency
    FROM orders
    WHERE status IN ('CONFIRMED', 'FAILED', 'CANCELLED') AND created_at >= @since::timestamptz
      AND (status = 'CONFIRMED' OR updated_at < now() - make_interval(secs => @settle_seconds::float8))
      AND id > @after::bigint
    ORDER BY id
    LIMIT @batch_size::int
), res AS (
    SELECT r.order_id, count(*)::bigint AS n,
           count(*) FILTER (WHERE r.status = 'ACTIVE')::bigint AS active_n,
           count(*) FILTER (WHERE r.status = 'CONFIRMED')::bigint AS confirmed_n,
           coalesce(sum(r.quantity) FILTER (WHERE r.status = 'ACTIVE'), 0)::bigint AS active_units,
           coalesce(sum(r.quantity) FILTER (WHERE r.status = 'CONFIRMED'), 0)::bigint AS confirmed_units
    FROM stock_reservations r JOIN scope s ON s.id = r.order_id
    GROUP BY r.order_id
), items AS (
    SELECT it.order_id, sum(it.quantity::bigint * it.unit_price_minor)::bigint AS total,
           sum((it.quantity - it.cancelled_quantity)::bigint * it.unit_price_minor)::bigint AS kept,
           sum(it.quantity)::bigint AS units
    FROM order_items it JOIN scope s ON s.id = it.order_id
    GROUP BY it.order_id
), unmatched AS (
    -- Ordered lines whose CONFIRMED reservations do not add up to the quantity ordered, or whose
    -- cancelled units differ from those the reservations record.
    SELECT it.order_id, count(*)::bigint AS lines
    FROM order_items it
    JOIN scope s ON s.id = it.order_id
    LEFT JOIN (SELECT r.order_id, r.sku_id, sum(r.quantity) AS q, sum(r.cancelled_quantity) AS cq
               FROM stock_reservations r JOIN scope s2 ON s2.id = r.order_id
               WHERE r.status = 'CONFIRMED'
               GROUP BY r.order_id, r.sku_id) c
           ON c.order_id = it.order_id AND c.sku_id = it.sku_id
    WHERE coalesce(c.q, 0) <> it.quantity OR coalesce(c.cq, 0) <> it.cancelled_quantity
    GROUP BY it.order_id
), refunding AS (
    -- Orders with a line cancellation whose refund is not done yet, and is not late: recorded
    -- within the settle time, or waiting for support.
    SELECT lc.order_id, count(*)::bigint AS n
    FROM line_cancellations lc JOIN scope s ON s.id = lc.order_id
    WHERE lc.refunded_at IS NULL
      AND (lc.attention IS NOT NULL OR lc.created_at > now() - make_interval(secs => @settle_seconds::float8))
    GROUP BY lc.order_id
), joined AS (
    SELECT s.id, s.status, coalesce(s.failure_code, '')::text AS failure_code, s.total_minor, s.currency,
           -- what the items add up to, less the order's spent coupon; what the units kept are
           -- worth, less the coupon's share of them (line cancellations refund the difference)
           (coalesce(i.total, 0) - coalesce(cr.discount_minor, 0))::bigint AS items_total,
           (coalesce(i.kept, 0) - floor(coalesce(cr.discount_minor, 0)::numeric * coalesce(i.kept, 0)
                                        / greatest(coalesce(i.total, 0), 1)))::bigint AS kept_total,
           coalesce(rf.n, 0)::bigint AS refunds_under_way,
           coalesce(r.n, 0)::bigint AS reservations, coalesce(r.active_n, 0)::bigint AS active_n,
           coalesce(r.confirmed_n, 0)::bigint AS confirmed_n, coalesce(r.active_units, 0)::bigint AS active_units,
           coalesce(r.confirmed_units, 0)::bigint AS confirmed_units, coalesce(u.lines, 0)::bigint AS unmatched_lines,
           coalesce(p.status, '')::text AS payment_status, coalesce(p.intent_id, '')::text AS payment_intent_id,
           coalesce(p.amount_minor, 0)::bigint AS payment_amount, coalesce(p.captured_minor, 0)::bigint AS payment_captured,
           coalesce(p.refunded_minor, 0)::bigint AS payment_refunded
    FROM scope s
    LEFT JOIN res r ON r.order_id = s.id
    LEFT JOIN items i ON i.order_id = s.id
    LEFT JOIN unmatched u ON u.order_id = s.id
    LEFT JOIN refunding rf ON rf.order_id = s.id
    LEFT JOIN payments p ON p.order_id = s.id
    LEFT JOIN coupon_redemptions cr ON cr.order_id = s.id AND cr.status = 'CONFIRMED'
)
SELECT id, status::text AS status, failure_code, total_minor, currency::text AS currency, items_total, kept_total, refunds_under_way,
       reservations, active_n, confirmed_n,
       active_units, confirmed_units, unmatched_lines,
       payment_status, payment_intent_id, payment_amount, payment_captured, payment_refunded,
       (status = 'CONFIRMED' AND (reservations = 0 OR confirmed_n <> reservations OR unmatched_lines > 0
                                  OR items_total <> total_minor))::bool AS unfulfilled,
       (status <> 'CONFIRMED' AND active_n + confirmed_n > 0)::bool AS stock_kept
FROM joined
ORDER BY id;

-- name: AuditStaleReservations :many
-- ACTIVE reservations whose hold ended more than @allowed_seconds ago: the hold child and the
-- sweeper should both have released them by now.
SELECT id, order_id, sku_id, warehouse_id, quantity, expires_at,
       EXTRACT(EPOCH FROM now() - expires_at)::float8 AS overdue_seconds
FROM stock_reservations
WHERE status = 'ACTIVE' AND expires_at < now() - make_interval(secs => @allowed_seconds::float8)
ORDER BY expires_at, id
LIMIT 1000;

-- name: AuditOpenOrdersPastHold :many
-- Orders still waiting for payment more than @slack_seconds after their hold ended (an order that
-- never recorded a hold is given @hold_seconds from its creation). NEEDS_ATTENTION is a reason
-- to be open and is not listed, nor is an order that needed attention or had a support action in
-- the last @attention_seconds (a parked step retried, by support or by itself, shows the order
-- open while it runs).
SELECT id, workflow_id, status::text AS status, hold_expires_at, created_at,
       EXTRACT(EPOCH FROM now() - coalesce(hold_expires_at, created_at + make_interval(secs => @hold_seconds::float8)))::float8
           AS past_hold_seconds
FROM orders o
WHERE status = 'PENDING_PAYMENT'
  AND coalesce(hold_expires_at, created_at + make_interval(secs => @hold_seconds::float8))
      < now() - make_interval(secs => @slack_seconds::float8)
  AND NOT EXISTS (SELECT 1 FROM order_events e
                  WHERE e.order_id = o.id AND e.kind IN ('needs_attention', 'support_action')
                    AND e.created_at > now() - make_interval(secs => @attention_seconds::float8))
ORDER BY id
LIMIT 1000;

-- name: AuditOrdersOfWorkflows :many
-- The orders behind open workflows: order workflows by workflow id, hold children by order id;
-- attention_recent as in AuditOpenOrdersPastHold.
SELECT id, workflow_id, status::text AS status, hold_expires_at, created_at, updated_at,
       EXISTS (SELECT 1 FROM order_events e
               WHERE e.order_id = o.id AND e.kind IN ('needs_attention', 'support_action')
                 AND e.created_at > now() - make_interval(secs => @attention_seconds::float8))::bool AS attention_recent
FROM orders o
WHERE workflow_id = ANY (@workflow_ids::text[]) OR id = ANY (@order_ids::bigint[]);

-- name: AuditCounts :one
-- What the audit looked at, and its clock.
SELECT (SELECT count(*) FROM inventory)::bigint AS inventory_rows,
       (SELECT count(*) FROM inventory_ledger)::bigint AS ledger_entries,
       (SELECT count(*) FROM stock_reservations)::bigint AS reservations,
       (SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE')::bigint AS active_reservations,
       now()::timestamptz AS checked_at;

-- name: AuditOrderCounts :many
SELECT status::text AS status, count(*)::bigint AS orders
FROM orders
WHERE created_at >= @since::timestamptz
GROUP BY status
ORDER BY status;

-- name: AuditCoupons :many
-- Coupons whose count of redemptions disagrees with the redemptions not given back, or passes the
-- limit.
SELECT c.id, c.code, c.redeemed, c.max_redemptions,
       (SELECT count(*) FROM coupon_redemptions r WHERE r.coupon_id = c.id AND r.status <> 'RELEASED')::int AS held
FROM coupons c
WHERE c.redeemed <> (SELECT count(*) FROM coupon_redemptions r WHERE r.coupon_id = c.id AND r.status <> 'RELEASED')
   OR c.redeemed > c.max_redemptions
ORDER BY c.id;

-- name: AuditRedemptions :many
-- Redemptions that do not follow their order: spent (CONFIRMED) with a confirmed order, given back
-- (RELEASED) with a failed or cancelled one, HELD only while the order is open. The order's final
-- transition settles its redemption in the same transaction.
SELECT r.order_id, r.status::text AS redemption_status, o.status::text AS order_status
FROM coupon_redemptions r JOIN orders o ON o.id = r.order_id
WHERE o.created_at >= @since::timestamptz
  AND ((o.status = 'CONFIRMED' AND r.status <> 'CONFIRMED')
    OR (o.status IN ('FAILED', 'CANCELLED') AND r.status <> 'RELEASED')
    OR (o.status IN ('PENDING_PAYMENT', 'NEEDS_ATTENTION') AND r.status <> 'HELD'))
ORDER BY r.order_id;
