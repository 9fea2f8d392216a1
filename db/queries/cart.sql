-- name: GetCart :one
SELECT id, user_id, doc, version, merged_into, merged_at, created_at, updated_at
FROM carts
WHERE id = @id;
