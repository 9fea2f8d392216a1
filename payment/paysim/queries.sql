-- name: CreateIntent :one
-- A new intent, or no row when the idempotency key already names one (the caller then reads it).
INSERT INTO paysim.intents (id, idempotency_key, order_id, amount_minor, currency, token, status,
                            redirect_url, decline_code)
VALUES (@id, @idempotency_key, @order_id, @amount_minor, @currency, @token, @status,
        @redirect_url, @decline_code)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING *;

-- name: IntentByKey :one
SELECT * FROM paysim.intents WHERE idempotency_key = $1;

-- name: IntentByID :one
SELECT * FROM paysim.intents WHERE id = $1;

-- name: Capture :one
-- AUTHORIZED → CAPTURED, the full amount.
UPDATE paysim.intents
   SET status = 'CAPTURED', captured_minor = amount_minor, updated_at = now()
 WHERE idempotency_key = $1 AND status = 'AUTHORIZED'
RETURNING *;

-- name: Void :one
-- REQUIRES_ACTION or AUTHORIZED → VOIDED: the hold is released.
UPDATE paysim.intents
   SET status = 'VOIDED', updated_at = now()
 WHERE idempotency_key = $1 AND status IN ('REQUIRES_ACTION', 'AUTHORIZED')
RETURNING *;

-- name: Refund :one
-- CAPTURED → REFUNDED, the whole capture.
UPDATE paysim.intents
   SET status = 'REFUNDED', refunded_minor = captured_minor, updated_at = now()
 WHERE idempotency_key = $1 AND status = 'CAPTURED'
RETURNING *;

-- name: Authenticate :one
-- The shopper's 3-D Secure answer: REQUIRES_ACTION → AUTHORIZED or DECLINED. A void racing it
-- (the hold expired) leaves the intent VOIDED and this statement without a row.
UPDATE paysim.intents
   SET status = @status, decline_code = @decline_code, updated_at = now()
 WHERE id = @id AND status = 'REQUIRES_ACTION'
RETURNING *;

-- name: EnqueueWebhook :exec
-- claim_seconds > 0: the enqueuer delivers it itself first, and the deliverer leaves it alone
-- that long.
INSERT INTO paysim.webhook_events (id, intent_id, type, payload, next_attempt_at)
VALUES (@id, @intent_id, @type, @payload, now() + make_interval(secs => @claim_seconds::float8));

-- name: ClaimDueWebhooks :many
-- The deliverer's batch. SKIP LOCKED lets several API replicas share the work; the lease moves
-- next_attempt_at past the delivery's timeout, so nobody else sends the event meanwhile, and a
-- deliverer that dies leaves it for the next one.
WITH due AS (
    SELECT id
    FROM paysim.webhook_events
    WHERE delivered_at IS NULL AND gave_up_at IS NULL AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT @batch_size
    FOR UPDATE SKIP LOCKED
)
UPDATE paysim.webhook_events e
   SET next_attempt_at = now() + make_interval(secs => @lease_seconds::float8)
  FROM due
 WHERE e.id = due.id
RETURNING e.id, e.payload, e.attempts, e.created_at;

-- name: WebhookDelivered :exec
UPDATE paysim.webhook_events
   SET delivered_at = now(), attempts = attempts + 1, last_error = NULL
 WHERE id = $1 AND delivered_at IS NULL;

-- name: WebhookFailed :one
-- A failed attempt: retry after retry_seconds, or give up once the event is older than
-- give_up_seconds.
UPDATE paysim.webhook_events
   SET attempts = attempts + 1, last_error = @last_error,
       next_attempt_at = now() + make_interval(secs => @retry_seconds::float8),
       gave_up_at = CASE WHEN created_at <= now() - make_interval(secs => @give_up_seconds::float8)
                         THEN now() END
 WHERE id = @id AND delivered_at IS NULL
RETURNING attempts, gave_up_at;

-- name: Faults :one
SELECT down_until, money_down_until, latency_ms, failure_rate FROM paysim.faults WHERE id;

-- name: SetFaults :exec
INSERT INTO paysim.faults (id, down_until, money_down_until, latency_ms, failure_rate, updated_at)
VALUES (true, sqlc.narg(down_until), sqlc.narg(money_down_until), sqlc.narg(latency_ms), sqlc.narg(failure_rate), now())
ON CONFLICT (id) DO UPDATE
   SET down_until = EXCLUDED.down_until, money_down_until = EXCLUDED.money_down_until,
       latency_ms = EXCLUDED.latency_ms, failure_rate = EXCLUDED.failure_rate, updated_at = now();

-- name: InsertRefund :one
-- A partial refund of the intent under intent_key, named by its own key; no row when the refund
-- key is already taken (the caller reads it) or there is no such intent.
INSERT INTO paysim.refunds (refund_key, intent_id, amount_minor)
SELECT @refund_key::text, id, @amount_minor::bigint FROM paysim.intents WHERE idempotency_key = @intent_key::text
ON CONFLICT (refund_key) DO NOTHING
RETURNING intent_id;

-- name: RefundByKey :one
SELECT r.refund_key, r.amount_minor, i.idempotency_key AS intent_key
FROM paysim.refunds r
JOIN paysim.intents i ON i.id = r.intent_id
WHERE r.refund_key = @refund_key;

-- name: RefundPart :one
-- CAPTURED: part of the capture goes back, only while the refunds stay within it; the intent is
-- REFUNDED once all of it has.
UPDATE paysim.intents
   SET refunded_minor = refunded_minor + @amount_minor::bigint,
       status = CASE WHEN refunded_minor + @amount_minor::bigint = captured_minor THEN 'REFUNDED' ELSE status END,
       updated_at = now()
 WHERE idempotency_key = @idempotency_key AND status = 'CAPTURED'
   AND refunded_minor + @amount_minor::bigint <= captured_minor
RETURNING *;

-- name: IntentsOfOrders :many
-- Every intent of the orders, under any key, oldest first: the provider's record of their money
-- that the auditor holds against the product's.
SELECT * FROM paysim.intents
WHERE order_id = ANY (@order_ids::bigint[])
ORDER BY order_id, created_at, id;
