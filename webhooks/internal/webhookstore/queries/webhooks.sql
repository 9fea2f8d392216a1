-- name: CreateWebhookEndpoint :one
INSERT INTO webhook_endpoints (seller_id, url, event_types, description)
VALUES (@seller_id, @url, @event_types::text[], @description)
RETURNING *;

-- name: CountWebhookEndpoints :one
SELECT count(*) FROM webhook_endpoints WHERE seller_id = @seller_id;

-- name: InsertWebhookSecret :exec
INSERT INTO webhook_secrets (endpoint_id, secret) VALUES (@endpoint_id, @secret);

-- name: RotateWebhookSecrets :one
-- The current secret keeps signing beside the new one until @overlap has passed; older rotated
-- ones end now at the latest.
WITH aged AS (
    UPDATE webhook_secrets
       SET expires_at = LEAST(COALESCE(expires_at, 'infinity'), now() + make_interval(secs => @overlap_seconds::float8))
     WHERE endpoint_id = @endpoint_id AND (expires_at IS NULL OR expires_at > now())
    RETURNING expires_at
)
SELECT COALESCE(max(expires_at), now())::timestamptz AS previous_expires_at FROM aged;

-- name: WebhookSigningSecrets :many
-- The secrets that sign now, newest first.
SELECT secret FROM webhook_secrets
 WHERE endpoint_id = @endpoint_id AND (expires_at IS NULL OR expires_at > now())
 ORDER BY id DESC;

-- name: SellerWebhookEndpoints :many
SELECT * FROM webhook_endpoints WHERE seller_id = @seller_id ORDER BY id;

-- name: WebhookEndpoints :many
-- Ops: every seller's endpoints, or one seller's (0: all).
SELECT * FROM webhook_endpoints WHERE @seller_id::bigint = 0 OR seller_id = @seller_id ORDER BY id LIMIT 500;

-- name: SellerWebhookEndpoint :one
SELECT * FROM webhook_endpoints WHERE id = @id AND seller_id = @seller_id;

-- name: WebhookEndpoint :one
SELECT * FROM webhook_endpoints WHERE id = @id;

-- name: UpdateWebhookEndpoint :one
UPDATE webhook_endpoints
   SET url = @url, event_types = @event_types::text[], description = @description, updated_at = now()
 WHERE id = @id AND seller_id = @seller_id
RETURNING *;

-- name: EnableWebhookEndpoint :one
-- Enabled again: the deliveries given up when it was disabled for failing are sent again, in
-- order, with those that waited meanwhile.
WITH e AS (
    UPDATE webhook_endpoints w
       SET status = 'ENABLED', disabled_reason = NULL, disabled_at = NULL, updated_at = now()
     WHERE w.id = @id AND w.seller_id = @seller_id
    RETURNING w.*
), requeued AS (
    UPDATE webhook_deliveries d
       SET status = 'PENDING', next_attempt_at = now(), first_failed_at = NULL
      FROM e
     WHERE d.endpoint_id = e.id AND d.status = 'FAILED'
)
SELECT * FROM e;

-- name: DisableWebhookEndpoint :one
UPDATE webhook_endpoints
   SET status = 'DISABLED', disabled_reason = @reason, disabled_at = now(), updated_at = now()
 WHERE id = @id AND seller_id = @seller_id
RETURNING *;

-- name: DeleteWebhookEndpoint :execrows
DELETE FROM webhook_endpoints WHERE id = @id AND seller_id = @seller_id;

-- name: WebhookEndpointsForEvent :many
-- The endpoints an event of event_type concerns among these sellers': every one subscribed,
-- enabled or not (a disabled endpoint's deliveries wait until it is enabled again).
SELECT id, seller_id FROM webhook_endpoints
 WHERE seller_id = ANY (@seller_ids::bigint[]) AND @event_type::text = ANY (event_types)
 ORDER BY id;

-- name: InsertWebhookDelivery :exec
INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body)
VALUES (@endpoint_id, @event_id, @event_type, @body)
ON CONFLICT (endpoint_id, event_id) DO NOTHING;

-- name: ClaimWebhookEndpoints :many
-- Enabled endpoints whose oldest waiting delivery is due, no other dispatcher holding them: each
-- taken for lease_seconds. One dispatcher per endpoint at a time keeps its deliveries in order.
UPDATE webhook_endpoints e
   SET lease_until = now() + make_interval(secs => @lease_seconds::float8)
 WHERE e.id IN (
        SELECT c.id FROM webhook_endpoints c
         WHERE c.status = 'ENABLED' AND (c.lease_until IS NULL OR c.lease_until < now())
           AND (SELECT d.next_attempt_at FROM webhook_deliveries d
                 WHERE d.endpoint_id = c.id AND d.status = 'PENDING'
                 ORDER BY d.event_id LIMIT 1) <= now()
         ORDER BY c.id
         LIMIT @max_endpoints
           FOR UPDATE SKIP LOCKED)
RETURNING e.id, e.seller_id, e.url;

-- name: ExtendWebhookLease :execrows
UPDATE webhook_endpoints SET lease_until = now() + make_interval(secs => @lease_seconds::float8)
 WHERE id = @id AND status = 'ENABLED';

-- name: ReleaseWebhookEndpoint :exec
UPDATE webhook_endpoints SET lease_until = NULL WHERE id = @id;

-- name: NextWebhookDelivery :one
-- An endpoint's oldest waiting delivery: the only one that may go out now.
SELECT id, event_id, event_type, body, attempts, next_attempt_at, first_failed_at, replay
  FROM webhook_deliveries
 WHERE endpoint_id = @endpoint_id AND status = 'PENDING'
 ORDER BY event_id
 LIMIT 1;

-- name: RecordWebhookAttempt :exec
INSERT INTO webhook_attempts (delivery_id, status_code, latency_ms, error, replay)
VALUES (@delivery_id, sqlc.narg(status_code), @latency_ms, sqlc.narg(error), @replay);

-- name: WebhookDelivered :exec
UPDATE webhook_deliveries
   SET status = 'DELIVERED', attempts = attempts + 1, delivered_at = now(), last_attempt_at = now(),
       last_status_code = @status_code, last_error = NULL, last_latency_ms = @latency_ms, first_failed_at = NULL,
       replay = false
 WHERE id = @id;

-- name: WebhookFailed :exec
UPDATE webhook_deliveries
   SET attempts = attempts + 1, last_attempt_at = now(), last_status_code = sqlc.narg(status_code),
       last_error = @error, last_latency_ms = @latency_ms, first_failed_at = COALESCE(first_failed_at, now()),
       next_attempt_at = now() + make_interval(secs => @retry_in_seconds::float8)
 WHERE id = @id;

-- name: GiveUpWebhookEndpoint :one
-- The delivery failed for longer than it is retried: it is given up and its endpoint disabled,
-- with an event that tells the seller. Both once.
WITH d AS (
    UPDATE webhook_deliveries x SET status = 'FAILED' WHERE x.id = @delivery_id AND x.status = 'PENDING' RETURNING x.endpoint_id
), e AS (
    UPDATE webhook_endpoints w
       SET status = 'DISABLED', disabled_reason = @reason, disabled_at = now(), lease_until = NULL, updated_at = now()
      FROM d
     WHERE w.id = d.endpoint_id AND w.status = 'ENABLED'
    RETURNING w.id, w.seller_id, w.url
)
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'seller', e.seller_id::text, 'webhook.endpoint_disabled',
       jsonb_build_object('sellerId', e.seller_id, 'endpointId', e.id, 'url', e.url, 'reason', @reason::text)
  FROM e
RETURNING outbox_events.id;

-- name: WebhookDeliveries :many
-- An endpoint's delivery log, newest first, before_id (0: from the newest).
SELECT id, event_id, event_type, status, attempts, next_attempt_at, first_failed_at, last_attempt_at,
       last_status_code, last_error, last_latency_ms, delivered_at, created_at
  FROM webhook_deliveries
 WHERE endpoint_id = @endpoint_id AND (@before_id::bigint = 0 OR id < @before_id)
   AND (@status::text = '' OR status = @status)
 ORDER BY id DESC
 LIMIT @max_rows;

-- name: WebhookDelivery :one
SELECT * FROM webhook_deliveries WHERE id = @id AND endpoint_id = @endpoint_id;

-- name: WebhookAttempts :many
SELECT at, status_code, latency_ms, error, replay FROM webhook_attempts WHERE delivery_id = @delivery_id ORDER BY id;

-- name: ReplayWebhookDelivery :one
-- Sends the delivery again as soon as its endpoint's older waiting deliveries have gone.
UPDATE webhook_deliveries
   SET status = 'PENDING', next_attempt_at = now(), first_failed_at = NULL, replay = true
 WHERE id = @id AND endpoint_id = @endpoint_id
RETURNING id;
