-- name: GetCart :one
SELECT id, user_id, doc, version, merged_into, merged_at, created_at, updated_at
FROM carts
WHERE id = @id;

-- name: CartDoc :one
-- The cart page's read of the document, as text: the caller parses it once (a jsonb column would be
-- parsed once more on its way into json.RawMessage).
SELECT version, doc::text AS doc, merged_at FROM carts WHERE id = @id;

-- name: CartLineInfo :many
-- What the cart page shows beside each line: the catalog's current price with the campaigns in
-- force, and the availability projection's stock figure (never the inventory itself). known is
-- false for a SKU the projection has no row for. ANY(array) keeps it an index lookup whatever the
-- catalog's size.
SELECT s.id, s.title, s.price_minor, s.currency::text AS currency,
       campaigns_in_force(s.id, s.seller_id)::jsonb AS campaigns,
       COALESCE(a.available, 0)::int AS available, (a.sku_id IS NOT NULL)::bool AS known
FROM skus s
LEFT JOIN sku_availability a ON a.sku_id = s.id
WHERE s.id = ANY (@sku_ids::bigint[]);

-- name: CreateCart :execrows
-- A cart's first write; a concurrent first write wins and this one re-reads and re-applies.
INSERT INTO carts (id, user_id, doc, version)
VALUES (@id, @user_id, @doc, 1)
ON CONFLICT (id) DO NOTHING;

-- name: EnsureCart :exec
INSERT INTO carts (id, user_id) VALUES (@id, @user_id)
ON CONFLICT (id) DO NOTHING;

-- name: UpdateCartDoc :execrows
-- Optimistic locking: the write lands only on the version it was computed from, and never on a
-- guest cart that has been merged.
UPDATE carts
   SET doc = @doc, version = version + 1, updated_at = now()
 WHERE id = @id AND version = @version AND merged_at IS NULL;

-- name: LockCart :one
SELECT id, user_id, doc, version, merged_into, merged_at
FROM carts
WHERE id = @id
FOR UPDATE;

-- name: MarkCartMerged :execrows
-- The guest cart's one transition to merged: the row count says whether this merge is the one.
UPDATE carts
   SET merged_into = @merged_into, merged_at = now(), version = version + 1, updated_at = now()
 WHERE id = @id AND merged_at IS NULL;

-- name: DeleteIdleCarts :one
-- One batch of the janitor: carts untouched for idle_seconds are deleted, and every non-empty
-- member cart among them leaves an abandoned-cart event in the outbox, in the same statement.
-- SKIP LOCKED passes over a cart a shopper is writing right now (it is not idle).
WITH idle AS (
    SELECT ic.id FROM carts ic
     WHERE ic.updated_at < now() - make_interval(secs => @idle_seconds::float8)
     ORDER BY ic.updated_at
     LIMIT @batch_size
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM carts c USING idle
     WHERE c.id = idle.id
    RETURNING c.id, c.user_id, c.doc, c.updated_at
), events AS (
    INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'cart', g.id, @event_type::text,
           jsonb_build_object('cartId', g.id, 'userId', g.user_id, 'items', g.doc->'items',
                              'lastActivityAt', g.updated_at)
      FROM gone g
     WHERE g.user_id IS NOT NULL
       AND jsonb_array_length(COALESCE(g.doc->'items', '[]'::jsonb)) > 0
     ORDER BY g.id
    RETURNING id
)
SELECT (SELECT count(*) FROM gone)::int AS deleted, (SELECT count(*) FROM events)::int AS events;
