-- name: InsertOrder :one
-- The unique (user_id, idempotency_key) makes a second run of the same request find the first
-- order instead of creating another. With max_open above 0 the order is written only while the
-- shopper has fewer than max_open orders waiting for payment; the caller holds the shopper's
-- LockUser(LockOpenOrders), so concurrent orders of one shopper cannot pass the count together.
INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id, run_id, address_id, price_version,
                    total_minor, currency)
SELECT @user_id::bigint, @idempotency_key::text, @request_hash::text, @workflow_id::text, @run_id::text,
       @address_id::bigint, @price_version::text, @total_minor::bigint, @currency::text
WHERE @max_open::int = 0
   OR (SELECT count(*) FROM orders o
        WHERE o.user_id = @user_id::bigint AND o.status = 'PENDING_PAYMENT') < @max_open::int
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING id;

-- name: PendingOrdersOf :one
-- The shopper's orders waiting for payment, and when the first of their holds ends (NULL while
-- none has its hold recorded yet).
SELECT count(*) AS pending,
       (SELECT hold_expires_at FROM orders h
         WHERE h.user_id = @user_id AND h.status = 'PENDING_PAYMENT' AND h.hold_expires_at IS NOT NULL
         ORDER BY h.hold_expires_at LIMIT 1) AS next_hold_end
FROM orders o
WHERE o.user_id = @user_id AND o.status = 'PENDING_PAYMENT';

-- name: OrderByKey :one
SELECT id, user_id, idempotency_key, request_hash, workflow_id, run_id, status, address_id, price_version,
       total_minor, currency, hold_expires_at, failure_code, created_at, updated_at, attention
FROM orders
WHERE user_id = @user_id AND idempotency_key = @idempotency_key;

-- name: GetOrder :one
SELECT id, user_id, idempotency_key, request_hash, workflow_id, status, address_id, price_version,
       total_minor, currency, hold_expires_at, failure_code, created_at, updated_at, attention, run_id,
       hold_extensions
FROM orders
WHERE id = @id;

-- name: ListOrdersOfUser :many
-- Newest first, keyset-paginated by id.
SELECT id, status, total_minor, currency, failure_code, created_at, updated_at
FROM orders
WHERE user_id = @user_id AND id < @before_id
ORDER BY id DESC
LIMIT @page_size;

-- name: InsertOrderItem :exec
INSERT INTO order_items (order_id, sku_id, seller_id, title, quantity, unit_price_minor, currency, list_price_minor,
                         campaign_ids)
VALUES (@order_id, @sku_id, @seller_id, @title, @quantity, @unit_price_minor, @currency, sqlc.narg(list_price_minor),
        sqlc.narg(campaign_ids)::bigint[])
ON CONFLICT (order_id, sku_id) DO NOTHING;

-- name: OrderItems :many
SELECT sku_id, seller_id, title, quantity, unit_price_minor, currency, list_price_minor, campaign_ids,
       cancelled_quantity
FROM order_items
WHERE order_id = @order_id
ORDER BY sku_id;

-- name: InsertOrderEvent :exec
INSERT INTO order_events (order_id, kind, detail) VALUES (@order_id, @kind, @detail);

-- name: OrderEvents :many
SELECT kind, detail, created_at FROM order_events WHERE order_id = @order_id ORDER BY id;

-- name: SetOrderHold :exec
UPDATE orders SET hold_expires_at = @hold_expires_at, updated_at = now() WHERE id = @id;

-- name: ExtendOrderHold :one
-- The shopper's extension of an order's hold, in one conditional statement: the order's expiry
-- and every one of its reservations move by by_seconds, only while the order waits for its
-- payment, has an extension left and its hold ends within window_seconds but has not ended, and
-- only while every reservation is still ACTIVE and unexpired. The caller locks the reservations
-- first (LockReservationsOfOrder), so the sweeper skips them and this statement's snapshot sees
-- whatever a release committed before; no row comes back when any condition fails.
WITH o AS (
    UPDATE orders x
       SET hold_expires_at = x.hold_expires_at + make_interval(secs => @by_seconds::float8),
           hold_extensions = x.hold_extensions + 1, updated_at = now()
     WHERE x.id = @order_id::bigint AND x.status = 'PENDING_PAYMENT' AND x.hold_extensions < @max_extensions::int
       AND x.hold_expires_at > now() AND x.hold_expires_at <= now() + make_interval(secs => @window_seconds::float8)
       AND NOT EXISTS (SELECT 1 FROM stock_reservations r
                        WHERE r.order_id = x.id AND (r.status <> 'ACTIVE' OR r.expires_at <= now()))
    RETURNING x.id, x.hold_expires_at, x.hold_extensions
), moved AS (
    UPDATE stock_reservations s
       SET expires_at = o.hold_expires_at
      FROM o
     WHERE s.order_id = o.id AND s.status = 'ACTIVE'
    RETURNING s.id
)
SELECT o.hold_expires_at::timestamptz AS hold_expires_at, o.hold_extensions,
       (SELECT count(*) FROM moved) AS moved
FROM o;

-- name: OrderHoldState :one
-- Why an extension was refused: the order's hold as it stands, beside the database's clock.
SELECT o.status, o.hold_expires_at, o.hold_extensions, now()::timestamptz AS now,
       EXISTS (SELECT 1 FROM stock_reservations r
                WHERE r.order_id = o.id AND (r.status <> 'ACTIVE' OR r.expires_at <= now())) AS lapsed
FROM orders o
WHERE o.id = @order_id;

-- name: TransitionOrder :one
-- A final status is written once: only from one of the open statuses; the row count decides.
UPDATE orders
   SET status = @to_status::text, failure_code = sqlc.narg(failure_code), updated_at = now(),
       attention = NULL
 WHERE id = @id AND status = ANY (@from_statuses::text[])
RETURNING status;

-- name: ParkOrder :one
-- The failing step and error: an open order moves to NEEDS_ATTENTION; an ended one (its stock or
-- money being given back) keeps its status and carries the attention.
UPDATE orders
   SET status = CASE WHEN status IN ('PENDING_PAYMENT', 'NEEDS_ATTENTION') THEN 'NEEDS_ATTENTION' ELSE status END,
       attention = @attention, updated_at = now()
 WHERE id = @id
RETURNING status;

-- name: EscalateOrder :one
-- A parked order waited for support past its escalation: its attention says since when, and when it
-- is given up.
UPDATE orders
   SET attention = attention || jsonb_strip_nulls(jsonb_build_object('escalatedAt', now(),
           'givesUpAt', sqlc.narg(gives_up_at)::timestamptz)),
       updated_at = now()
 WHERE id = @id AND attention IS NOT NULL
RETURNING status;

-- name: ResumeOrder :one
-- A parked order goes on: back to PENDING_PAYMENT if it was open, its attention cleared either way.
UPDATE orders
   SET status = CASE WHEN status = 'NEEDS_ATTENTION' THEN 'PENDING_PAYMENT' ELSE status END,
       attention = NULL, updated_at = now()
 WHERE id = @id AND (status = 'NEEDS_ATTENTION' OR attention IS NOT NULL)
RETURNING status;

-- name: InsertPayment :exec
INSERT INTO payments (order_id, idempotency_key, provider, amount_minor, currency)
VALUES (@order_id, @idempotency_key, @provider, @amount_minor, @currency)
ON CONFLICT (order_id) DO NOTHING;

-- name: GetPayment :one
SELECT * FROM payments WHERE order_id = @order_id;

-- name: PaymentRef :one
-- What the provider is asked by: the payment's key, the intent's id once recorded, and how long
-- ago the first authorization was attempted (-1: never), by the database's clock.
SELECT p.idempotency_key, coalesce(p.intent_id, '')::text AS intent_id, o.price_version, p.capture_before,
       coalesce(EXTRACT(EPOCH FROM now() - p.authorize_attempted_at), -1)::float8 AS attempted_seconds_ago
FROM payments p
JOIN orders o ON o.id = p.order_id
WHERE p.order_id = @order_id;

-- name: AuthorizeAttempted :exec
-- The first authorization attempt's time is kept; a repeat does not move it.
UPDATE payments SET authorize_attempted_at = coalesce(authorize_attempted_at, now())
WHERE order_id = @order_id;

-- name: RecordIntentID :exec
-- The intent's id, as soon as the provider made it and before it holds money: an answer lost
-- after this is found by id. An id once recorded is never replaced.
UPDATE payments SET intent_id = @intent_id, updated_at = now()
WHERE order_id = @order_id AND intent_id IS NULL;

-- name: PaymentByIntent :one
SELECT p.order_id, o.workflow_id, o.user_id, o.status
FROM payments p
JOIN orders o ON o.id = p.order_id
WHERE p.intent_id = @intent_id;

-- name: PaymentByKey :one
SELECT p.order_id, o.workflow_id, o.user_id, o.status
FROM payments p
JOIN orders o ON o.id = p.order_id
WHERE p.idempotency_key = @idempotency_key;

-- name: RecordPayment :exec
-- Mirrors the provider's intent. Final states are never overwritten by an earlier one arriving
-- late (a stale retry), and what was refunded never shrinks, so the row only moves forward. Once
-- the provider's answer is definite the order's payment method token is forgotten: no later call
-- authorizes again.
WITH forgotten AS (
    DELETE FROM payment_method_tokens t
     USING orders o
     WHERE @status::text NOT IN ('PENDING', 'UNKNOWN')
       AND o.id = @order_id
       AND t.user_id = o.user_id AND t.idempotency_key = o.idempotency_key AND t.request_hash = o.request_hash
)
UPDATE payments
   SET intent_id = COALESCE(sqlc.narg(intent_id), intent_id),
       status = @status,
       redirect_url = COALESCE(sqlc.narg(redirect_url), redirect_url),
       capture_before = COALESCE(sqlc.narg(capture_before), capture_before),
       captured_minor = @captured_minor,
       refunded_minor = @refunded_minor,
       updated_at = now()
 WHERE order_id = @order_id
   AND NOT (status IN ('CAPTURED', 'VOIDED', 'REFUNDED', 'DECLINED')
            AND @status::text IN ('PENDING', 'REQUIRES_ACTION', 'AUTHORIZED', 'UNKNOWN'))
   AND NOT (status = 'REFUNDED' AND @status::text = 'CAPTURED')
   AND @refunded_minor::bigint >= refunded_minor;

-- name: InsertIdempotencyRecord :exec
-- The first answer to (user, key) is kept. An answer to a request with another body than the
-- key's order was made from (a refusal of the reused key) is not recorded: the key stays the
-- order's, and its own request keeps its own answer.
INSERT INTO idempotency_records (user_id, idempotency_key, request_hash, order_id, outcome)
SELECT @user_id, @idempotency_key, @request_hash, sqlc.narg(order_id), @outcome
WHERE NOT EXISTS (SELECT 1 FROM orders o
                  WHERE o.user_id = @user_id AND o.idempotency_key = @idempotency_key
                    AND o.request_hash <> @request_hash)
ON CONFLICT (user_id, idempotency_key) DO NOTHING;

-- name: GetIdempotencyRecord :one
SELECT user_id, idempotency_key, request_hash, order_id, outcome, created_at
FROM idempotency_records
WHERE user_id = @user_id AND idempotency_key = @idempotency_key;

-- name: ClaimWebhookEvent :one
-- Takes a delivered event in hand, to act on it: a new event, or one a delivery took in hand and
-- neither acted on nor gave back before its claim ran out (its process died). No row when the
-- event was acted on already (a replay has no second effect), or another delivery has it in hand.
INSERT INTO payment_webhook_events (event_id, intent_id, type, claimed_until)
VALUES (@event_id, @intent_id, @type, now() + make_interval(secs => @claim_seconds::float8))
ON CONFLICT (event_id) DO UPDATE SET claimed_until = EXCLUDED.claimed_until
 WHERE payment_webhook_events.claimed_until < now()
RETURNING claimed_until::timestamptz;

-- name: WebhookEventActedOn :one
-- Whether an event seen before was acted on (false: a delivery has it in hand now).
SELECT (claimed_until IS NULL)::bool AS acted FROM payment_webhook_events WHERE event_id = @event_id;

-- name: WebhookEventDone :exec
-- The event was acted on under this claim: every later delivery of it is a duplicate.
UPDATE payment_webhook_events SET claimed_until = NULL
 WHERE event_id = @event_id AND claimed_until = @claimed_until::timestamptz;

-- name: ReleaseWebhookEvent :exec
-- The event was not acted on under this claim: given back, so that the next delivery acts on it.
DELETE FROM payment_webhook_events WHERE event_id = @event_id AND claimed_until = @claimed_until::timestamptz;

-- name: SavePaymentMethodToken :one
-- Keeps an order request's payment method token for its Authorize step, when the request's
-- address is the user's; says whether it is. A repeat of the same request finds the token kept.
WITH addr AS (
    SELECT a.user_id AS owner FROM addresses a WHERE a.id = @address_id::bigint AND a.user_id = @user_id::bigint
), kept AS (
    INSERT INTO payment_method_tokens (user_id, idempotency_key, request_hash, token)
    SELECT addr.owner, @idempotency_key::text, @request_hash::text, @token::text FROM addr
    ON CONFLICT DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM addr) AS address_ok;

-- name: PaymentMethodToken :one
SELECT t.token
FROM orders o
JOIN payment_method_tokens t
  ON t.user_id = o.user_id AND t.idempotency_key = o.idempotency_key AND t.request_hash = o.request_hash
WHERE o.id = @order_id;

-- name: ForgetStalePaymentMethodTokens :execrows
-- Tokens of requests that never reached a definite payment answer (refused before the payment,
-- or never placed), after the given age.
DELETE FROM payment_method_tokens
WHERE created_at < now() - make_interval(secs => @older_than_seconds::float8);

-- name: WaitingOrders :many
-- The orders the saga has not finished, for /metrics: how many in each open status, how long the
-- one longest in it has been there (its last change), and how far past its hold the most overdue
-- one is (orders_open_idx holds these rows). An ended order whose giving back waits for support
-- (attention set; orders_attention_idx) counts as NEEDS_ATTENTION. Escalated: those waiting past
-- their escalation (EscalateOrder).
SELECT (CASE WHEN status IN ('PENDING_PAYMENT', 'NEEDS_ATTENTION') THEN status ELSE 'NEEDS_ATTENTION' END)::text AS status,
       count(*) AS orders, count(*) FILTER (WHERE attention ? 'escalatedAt') AS escalated,
       COALESCE(EXTRACT(EPOCH FROM now() - min(updated_at)), 0)::float8 AS oldest_seconds,
       GREATEST(COALESCE(EXTRACT(EPOCH FROM now() - min(hold_expires_at) FILTER (WHERE status = 'PENDING_PAYMENT')), 0), 0)::float8 AS past_hold_seconds
FROM orders
WHERE status IN ('PENDING_PAYMENT', 'NEEDS_ATTENTION') OR attention IS NOT NULL
GROUP BY 1;

-- name: UnknownPayments :one
-- Payments of open orders whose outcome is UNKNOWN, for /metrics, and how long ago the oldest was
-- first sent to the provider (its row is rewritten at every answer, so not updated_at).
SELECT count(*) AS payments,
       COALESCE(EXTRACT(EPOCH FROM now() - min(p.created_at)), 0)::float8 AS oldest_seconds
FROM payments p
JOIN orders o ON o.id = p.order_id
WHERE p.status = 'UNKNOWN' AND o.status IN ('PENDING_PAYMENT', 'NEEDS_ATTENTION');

-- name: InsertLineCancellation :one
-- A request to cancel units of one line. Its refund is what the units kept were charged less what
-- they are charged after: the line's unit price, less the units' share of a coupon the order
-- spent, which the units kept carry in proportion (floor(discount × kept ÷ items), so that the
-- refunds of every cancellation of an order add up, to the unit, to what was captured). The caller
-- holds the order's row (LockOrder), so the sums are the order's as they stand. No row when the
-- request is already recorded (a repeat: the caller reads it) or the order has no such line.
WITH req AS (SELECT @units::int AS units),
totals AS (
    SELECT sum((quantity - cancelled_quantity)::bigint * unit_price_minor)::bigint AS kept,
           greatest(sum(quantity::bigint * unit_price_minor), 1)::bigint AS gross
    FROM order_items WHERE order_id = @order_id
),
coupon AS (
    SELECT coalesce(sum(discount_minor), 0)::bigint AS d
    FROM coupon_redemptions WHERE order_id = @order_id AND status = 'CONFIRMED'
)
INSERT INTO line_cancellations (order_id, request_id, sku_id, units, reason, requested_by, amount_minor, currency,
                                workflow_id)
SELECT oi.order_id, @request_id::text, oi.sku_id, req.units, @reason::text, @requested_by::text,
       (t.kept - floor(c.d::numeric * t.kept / t.gross))::bigint
     - ((t.kept - req.units * oi.unit_price_minor)
        - floor(c.d::numeric * (t.kept - req.units * oi.unit_price_minor) / t.gross))::bigint,
       oi.currency, sqlc.narg(workflow_id)::text
FROM order_items oi, req, totals t, coupon c
WHERE oi.order_id = @order_id AND oi.sku_id = @sku_id
ON CONFLICT (order_id, request_id) DO NOTHING
RETURNING id;

-- name: LockOrder :exec
-- Holds an order's row until the transaction ends (its line cancellations one at a time).
SELECT 1 FROM orders WHERE id = @id FOR UPDATE;

-- name: CancelLineUnits :one
-- Takes units off a CONFIRMED order's line, only while that many are still on it: the line's row
-- lock and this condition let concurrent requests cancel at most what the line has.
UPDATE order_items oi
   SET cancelled_quantity = oi.cancelled_quantity + @units::int
  FROM orders o
 WHERE oi.order_id = @order_id AND oi.sku_id = @sku_id AND o.id = oi.order_id AND o.status = 'CONFIRMED'
   AND oi.quantity - oi.cancelled_quantity >= @units::int
RETURNING oi.quantity, oi.cancelled_quantity;

-- name: LineOfOrder :one
-- An order's status and one of its lines (the line's columns are NULL when it has no such line).
SELECT o.status, oi.quantity, oi.cancelled_quantity
FROM orders o
LEFT JOIN order_items oi ON oi.order_id = o.id AND oi.sku_id = @sku_id
WHERE o.id = @order_id;

-- name: SetLineCancellationAllocations :exec
UPDATE line_cancellations SET allocations = @allocations, updated_at = now() WHERE id = @id;

-- name: LineCancellationByRequest :one
SELECT id, order_id, request_id, sku_id, units, reason, requested_by, amount_minor, currency, allocations,
       refunded_at, restocked_at, announced_at, attention, created_at, updated_at, workflow_id
FROM line_cancellations
WHERE order_id = @order_id AND request_id = @request_id;

-- name: SetLineCancellationWorkflow :exec
-- The request repeated by another workflow (support started it again): the unfinished
-- cancellation names the workflow now taking care of it.
UPDATE line_cancellations
   SET workflow_id = @workflow_id::text, updated_at = now()
 WHERE id = @id AND announced_at IS NULL AND workflow_id IS DISTINCT FROM @workflow_id::text;

-- name: GetLineCancellation :one
SELECT id, order_id, request_id, sku_id, units, reason, requested_by, amount_minor, currency, allocations,
       refunded_at, restocked_at, announced_at, attention, created_at, updated_at, workflow_id
FROM line_cancellations
WHERE id = @id;

-- name: LineCancellationsOfOrder :many
SELECT id, order_id, request_id, sku_id, units, reason, requested_by, amount_minor, currency, allocations,
       refunded_at, restocked_at, announced_at, attention, created_at, updated_at, workflow_id
FROM line_cancellations
WHERE order_id = @order_id
ORDER BY id;

-- name: MarkLineCancellationRefunded :execrows
UPDATE line_cancellations
   SET refunded_at = now(), attention = NULL, updated_at = now()
 WHERE id = @id AND refunded_at IS NULL;

-- name: SetLineCancellationAttention :exec
-- A step of the cancellation waits for support (attention set) or goes on (NULL).
UPDATE line_cancellations SET attention = sqlc.narg(attention), updated_at = now() WHERE id = @id;

-- name: AnnounceLineCancellation :one
-- The cancellation is done once, after its refund: the caller writes the timeline entry and the
-- outbox event in the same transaction.
UPDATE line_cancellations lc
   SET announced_at = now(), attention = NULL, updated_at = now()
  FROM order_items oi, orders o
 WHERE lc.id = @id AND lc.announced_at IS NULL AND lc.refunded_at IS NOT NULL
   AND oi.order_id = lc.order_id AND oi.sku_id = lc.sku_id AND o.id = lc.order_id
RETURNING lc.order_id, lc.sku_id, lc.units, lc.reason, lc.amount_minor, lc.currency,
          (lc.restocked_at IS NOT NULL)::bool AS restocked, oi.seller_id, o.user_id, oi.quantity,
          oi.cancelled_quantity;

-- name: OrderWorkflowID :one
-- The workflow of an order (for the handlers of events that name the order only).
SELECT workflow_id FROM orders WHERE id = @id;
