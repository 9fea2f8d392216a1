-- name: PricedSKUs :many
-- The SKUs with the campaigns in force on each now, highest priority first (pricing.Compute).
SELECT s.id, s.seller_id, s.title, s.price_minor, s.currency, s.max_per_order,
       campaigns_in_force(s.id, s.seller_id)::jsonb AS campaigns
FROM skus s
WHERE s.id = ANY (@ids::bigint[])
ORDER BY s.id;

-- name: InsertCampaign :one
INSERT INTO campaigns (name, seller_id, sku_ids, kind, value, currency, starts_at, ends_at, priority, stackable,
                       created_by)
VALUES (@name, sqlc.narg(seller_id), sqlc.narg(sku_ids)::bigint[], @kind, @value, sqlc.narg(currency), @starts_at,
        @ends_at, @priority, @stackable, @created_by)
RETURNING *;

-- name: ListCampaigns :many
-- Campaigns not yet ended, of one seller when seller_id is given; newest first.
SELECT * FROM campaigns
WHERE ends_at > now() AND (sqlc.narg(seller_id)::bigint IS NULL OR seller_id = sqlc.narg(seller_id))
ORDER BY id DESC
LIMIT 500;

-- name: EndCampaign :one
-- Ends a campaign now. One that has not started yet starts and ends now, a microsecond apart (the
-- window must not be empty), so it prices no line after this statement. Every SET reads the row as
-- it was: the end is worked out from the new start, never from the old one (which would keep a
-- campaign of 2099 running from now until 2099). A seller may end only its own (seller_id given).
UPDATE campaigns
   SET ends_at = GREATEST(LEAST(ends_at, now()), LEAST(starts_at, now()) + interval '1 microsecond'),
       starts_at = LEAST(starts_at, now())
 WHERE id = @id AND (sqlc.narg(seller_id)::bigint IS NULL OR seller_id = sqlc.narg(seller_id))
RETURNING *;
