-- name: TryLockOutboxRelay :one
-- One relay at a time across worker replicas keeps events in order. (Relays of releases before
-- the broker take the lock (2, 0) on the old outbox table, which holds nothing new: they never
-- wait for this one, nor it for them.)
SELECT pg_try_advisory_xact_lock(2, 1);

-- name: UnpublishedOutbox :many
SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at, attempts, traceparent, tracestate
FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL
ORDER BY id
LIMIT @batch_size;

-- name: OutboxHandlerFailed :one
-- One more failed attempt; after max_attempts the event is set aside (dead_at).
UPDATE outbox_events
   SET attempts = attempts + 1, last_error = @last_error,
       dead_at = CASE WHEN attempts + 1 >= @max_attempts::int THEN now() END
 WHERE id = @id
RETURNING (dead_at IS NOT NULL)::bool AS dead;

-- name: MarkOutboxPublished :exec
UPDATE outbox_events SET published_at = now() WHERE id = ANY (@ids::bigint[]) AND published_at IS NULL;

-- name: OutboxLag :one
SELECT count(*) AS pending, COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL;

-- name: PurgePublishedOutbox :execrows
-- Published events older than the retention go, a batch at a time: the broker's stream and the
-- consumers hold them from then on.
DELETE FROM outbox_events
 WHERE id IN (SELECT id FROM outbox_events
               WHERE published_at < now() - make_interval(secs => @keep_seconds::float8)
               ORDER BY published_at LIMIT @batch_size);
