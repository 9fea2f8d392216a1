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
