-- name: ListWarehouses :many
SELECT id, code, name, city, lat, lon FROM warehouses ORDER BY id;

-- name: ExistingWarehouses :many
SELECT id FROM warehouses WHERE id = ANY (@ids::int[]);

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

-- name: SKUsBySellerCodes :many
SELECT id, seller_id, code FROM skus WHERE seller_id = @seller_id AND code = ANY (@codes::text[]);

-- name: SKUsByIDs :many
SELECT id, seller_id, code, title, price_minor, currency, max_per_order, price_version
FROM skus
WHERE id = ANY (@ids::bigint[])
ORDER BY id;
