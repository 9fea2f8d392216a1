-- name: CreateIntent :one
-- A new intent, made but not confirmed: no money is held yet.
INSERT INTO paysim.intents (id, idempotency_key, order_id, order_version, amount_minor, currency, token, status)
VALUES (@id, @idempotency_key, @order_id, @order_version, @amount_minor, @currency, @token, 'CREATED')
RETURNING *;

-- name: TakeKey :one
-- Records an idempotency key for an operation on an intent: a new key, or one older than the
-- window (forgotten, as a real provider forgets it). No row when the key is live: the caller reads
-- it (KeyOf) and answers the repeat, or refuses other parameters. A concurrent request under the
-- same key waits here for the first to commit.
INSERT INTO paysim.idempotency_keys (key, operation, request_hash, intent_id)
VALUES (@key, @operation, @request_hash, @intent_id)
ON CONFLICT (key) DO UPDATE
   SET operation = EXCLUDED.operation, request_hash = EXCLUDED.request_hash, intent_id = EXCLUDED.intent_id,
       created_at = now()
 WHERE paysim.idempotency_keys.created_at <= now() - make_interval(secs => @window_seconds::float8)
RETURNING key;

-- name: KeyOf :one
SELECT key, operation, request_hash, intent_id, created_at FROM paysim.idempotency_keys WHERE key = $1;

-- name: IntentByID :one
SELECT * FROM paysim.intents WHERE id = $1;

-- name: SearchIntent :one
-- The search by metadata: the newest intent under the payment key that the search index shows,
-- i.e. made at least lag_seconds ago (a real provider's search lags its writes).
SELECT * FROM paysim.intents
WHERE idempotency_key = @idempotency_key AND created_at <= now() - make_interval(secs => @lag_seconds::float8)
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: Confirm :one
-- CREATED → the token's answer: AUTHORIZED (capturable until capture_before), REQUIRES_ACTION
-- or DECLINED.
UPDATE paysim.intents
   SET status = @status, redirect_url = @redirect_url, decline_code = @decline_code,
       capture_before = sqlc.narg(capture_before), updated_at = now()
 WHERE id = @id AND status = 'CREATED'
RETURNING *;

-- name: Capture :one
-- AUTHORIZED → CAPTURED, the full amount, only before the authorization lapses.
UPDATE paysim.intents
   SET status = 'CAPTURED', captured_minor = amount_minor, updated_at = now()
 WHERE id = $1 AND status = 'AUTHORIZED' AND (capture_before IS NULL OR capture_before > now())
RETURNING *;

-- name: Void :one
-- CREATED, REQUIRES_ACTION or AUTHORIZED → VOIDED: the hold is released (a lapsed one too).
UPDATE paysim.intents
   SET status = 'VOIDED', updated_at = now()
 WHERE id = $1 AND status IN ('CREATED', 'REQUIRES_ACTION', 'AUTHORIZED')
RETURNING *;

-- name: Refund :one
-- CAPTURED → REFUNDED, what is left of the capture.
UPDATE paysim.intents
   SET status = 'REFUNDED', refunded_minor = captured_minor, updated_at = now()
 WHERE id = $1 AND status = 'CAPTURED'
RETURNING *;

-- name: Authenticate :one
-- The shopper's 3-D Secure answer: REQUIRES_ACTION → AUTHORIZED or DECLINED. A void racing it
-- (the hold expired) leaves the intent VOIDED and this statement without a row.
UPDATE paysim.intents
   SET status = @status, decline_code = @decline_code, capture_before = sqlc.narg(capture_before), updated_at = now()
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
-- A partial refund of an intent, its key in its metadata; no row when a refund under the key
-- exists (the caller reads it: found by its metadata, whatever the key window).
INSERT INTO paysim.refunds (refund_key, intent_id, amount_minor)
VALUES (@refund_key, @intent_id, @amount_minor)
ON CONFLICT (refund_key) DO NOTHING
RETURNING intent_id;

-- name: RefundByKey :one
SELECT refund_key, intent_id, amount_minor FROM paysim.refunds WHERE refund_key = @refund_key;

-- name: RefundPart :one
-- CAPTURED: part of the capture goes back, only while the refunds stay within it; the intent is
-- REFUNDED once all of it has.
UPDATE paysim.intents
   SET refunded_minor = refunded_minor + @amount_minor::bigint,
       status = CASE WHEN refunded_minor + @amount_minor::bigint = captured_minor THEN 'REFUNDED' ELSE status END,
       updated_at = now()
 WHERE id = @id AND status = 'CAPTURED'
   AND refunded_minor + @amount_minor::bigint <= captured_minor
RETURNING *;

-- name: IntentsOfOrders :many
-- Every intent of the orders, under any key, oldest first: the provider's record of their money
-- that the auditor holds against the product's.
SELECT * FROM paysim.intents
WHERE order_id = ANY (@order_ids::bigint[])
ORDER BY order_id, created_at, id;
