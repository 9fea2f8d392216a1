-- name: UpsertWarehouse :exec
INSERT INTO warehouses (id, code, name, city, lat, lon)
VALUES (@id, @code, @name, @city, @lat, @lon)
ON CONFLICT (id) DO UPDATE
   SET code = EXCLUDED.code, name = EXCLUDED.name, city = EXCLUDED.city,
       lat = EXCLUDED.lat, lon = EXCLUDED.lon;

-- name: ListWarehouses :many
SELECT id, code, name, city, lat, lon FROM warehouses ORDER BY id;

-- name: ExistingWarehouses :many
SELECT id FROM warehouses WHERE id = ANY (@ids::int[]);

-- name: UpsertSeller :exec
INSERT INTO sellers (id, name) VALUES (@id, @name)
ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name;

-- name: SellerExists :one
SELECT EXISTS (SELECT 1 FROM sellers WHERE id = @id);

-- name: UpsertSKU :one
-- A seller's catalog row, keyed by the seller's own code. A price or currency change moves
-- price_version, which invalidates every priceVersion a shopper was shown.
INSERT INTO skus (seller_id, code, title, price_minor, currency, max_per_order)
VALUES (@seller_id, @code, @title, @price_minor, @currency, @max_per_order)
ON CONFLICT (seller_id, code) DO UPDATE
   SET title = EXCLUDED.title,
       price_minor = EXCLUDED.price_minor,
       currency = EXCLUDED.currency,
       max_per_order = EXCLUDED.max_per_order,
       price_version = skus.price_version
           + CASE WHEN (skus.price_minor, skus.currency) IS DISTINCT FROM (EXCLUDED.price_minor, EXCLUDED.currency)
                  THEN 1 ELSE 0 END,
       updated_at = now()
RETURNING id, price_version, (xmax = 0) AS created;

-- name: InsertSKUWithID :exec
-- Demo data only: fixed ids so that examples in the documentation stay true.
INSERT INTO skus (id, seller_id, code, title, price_minor, currency, max_per_order)
VALUES (@id, @seller_id, @code, @title, @price_minor, @currency, @max_per_order)
ON CONFLICT (id) DO NOTHING;

-- name: SKUsBySellerCodes :many
SELECT id, seller_id, code FROM skus WHERE seller_id = @seller_id AND code = ANY (@codes::text[]);

-- name: SKUsByIDs :many
SELECT id, seller_id, code, title, price_minor, currency, max_per_order, price_version
FROM skus
WHERE id = ANY (@ids::bigint[])
ORDER BY id;

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

-- name: CreateAddress :one
-- With max_addresses above 0 the address is written only while the user has fewer; the caller
-- holds the user's LockUser(LockAddressBook), so concurrent inserts cannot pass the count together.
INSERT INTO addresses (user_id, city, line1, lat, lon)
SELECT @user_id::bigint, @city::text, @line1::text, @lat::float8, @lon::float8
WHERE @max_addresses::int = 0
   OR (SELECT count(*) FROM addresses a WHERE a.user_id = @user_id::bigint) < @max_addresses::int
RETURNING id, created_at;

-- name: ListAddresses :many
SELECT id, user_id, city, line1, lat, lon, created_at
FROM addresses
WHERE user_id = @user_id
ORDER BY id
LIMIT 100;

-- name: CountAddresses :one
SELECT count(*) FROM addresses WHERE user_id = @user_id;

-- name: GetAddress :one
SELECT id, user_id, city, line1, lat, lon, created_at
FROM addresses
WHERE id = @id AND user_id = @user_id;

-- name: OrderShipTo :one
-- Where an order ships to, read by its reserve step, so that the coordinates never travel through
-- the order workflow.
SELECT a.lat, a.lon
FROM orders o
JOIN addresses a ON a.id = o.address_id
WHERE o.id = @order_id;

-- name: InsertOutboxEvent :exec
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload);

-- name: InsertOrderOutboxEvent :exec
-- An order event: the order as it stands and its lines (order_event_payload), with extra fields.
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', (@order_id::bigint)::text, @event_type, order_event_payload(@order_id::bigint) || @extra::jsonb);
