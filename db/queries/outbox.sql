-- name: TryLockOutboxRelay :one
-- One relay at a time across worker replicas keeps events in order.
SELECT pg_try_advisory_xact_lock(2, 0);

-- name: UnpublishedOutbox :many
SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at, attempts
FROM outbox
WHERE published_at IS NULL AND dead_at IS NULL
ORDER BY id
LIMIT @batch_size;

-- name: OutboxHandlerFailed :one
-- One more failed attempt; after max_attempts the event is set aside (dead_at).
UPDATE outbox
   SET attempts = attempts + 1, last_error = @last_error,
       dead_at = CASE WHEN attempts + 1 >= @max_attempts::int THEN now() END
 WHERE id = @id
RETURNING (dead_at IS NOT NULL)::bool AS dead;

-- name: MarkOutboxPublished :exec
UPDATE outbox SET published_at = now() WHERE id = ANY (@ids::bigint[]) AND published_at IS NULL;

-- name: OutboxLag :one
SELECT count(*) AS pending, COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
FROM outbox
WHERE published_at IS NULL AND dead_at IS NULL;

-- name: OrderWorkflowID :one
SELECT workflow_id FROM orders WHERE id = @id;
