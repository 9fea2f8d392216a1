-- name: LockRelayCursor :one
-- One relay at a time: whoever holds the cursor row works; another relay skips and waits.
SELECT last_event_id, events_applied
FROM availability_relay
WHERE id = 1
FOR UPDATE SKIP LOCKED;

-- name: HasInventoryChanges :one
-- The idle relay's poll: one index probe, no transaction, no lock.
SELECT EXISTS (SELECT 1 FROM inventory_changes);

-- name: ApplyInventoryChanges :one
-- One batch of the relay, in one statement and so one snapshot: the oldest change rows are
-- consumed (deleted), the sellable count of their SKUs is recomputed from the inventory as that
-- snapshot sees it (a change row is visible exactly when its inventory change is), the projection
-- is upserted and the cursor advanced (no row comes back when there was nothing to apply). The
-- batch is everything still in the table in id order,
-- not only ids above the cursor, so a change that committed after a higher id was applied is
-- still picked up.
WITH batch AS (
    SELECT id FROM inventory_changes ORDER BY id LIMIT @batch_size
), consumed AS (
    DELETE FROM inventory_changes ch USING batch b
     WHERE ch.id = b.id
    RETURNING ch.id, ch.sku_id
), per_sku AS (
    SELECT sku_id, max(id) AS last_id FROM consumed GROUP BY sku_id
), truth AS (
    SELECT p.sku_id, p.last_id, COALESCE(sum(i.on_hand - i.reserved), 0)::int AS available
      FROM per_sku p
      LEFT JOIN inventory i ON i.sku_id = p.sku_id
     GROUP BY p.sku_id, p.last_id
), upserted AS (
    INSERT INTO sku_availability AS a (sku_id, available, last_event_id, updated_at)
    SELECT sku_id, available, last_id, now() FROM truth
    ON CONFLICT (sku_id) DO UPDATE
       SET available = EXCLUDED.available,
           last_event_id = GREATEST(a.last_event_id, EXCLUDED.last_event_id),
           updated_at = EXCLUDED.updated_at
    RETURNING a.sku_id
)
UPDATE availability_relay r
   SET last_event_id = GREATEST(r.last_event_id, COALESCE((SELECT max(id) FROM consumed), 0)),
       events_applied = r.events_applied + (SELECT count(*) FROM consumed),
       updated_at = now()
 WHERE r.id = 1 AND EXISTS (SELECT 1 FROM consumed)
RETURNING (SELECT count(*) FROM consumed)::int AS applied,
          (SELECT count(*) FROM upserted)::int AS skus,
          r.last_event_id;

-- name: RelayBacklog :one
-- The relay's lag: how many changes wait, and how long the oldest has waited (0 when none).
SELECT count(*) AS pending,
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(changed_at)), 0)::float8 AS oldest_seconds
FROM inventory_changes;

-- name: RelayCursor :one
SELECT last_event_id, events_applied, updated_at FROM availability_relay WHERE id = 1;

-- name: ProjectedAvailability :many
SELECT sku_id, available, last_event_id, updated_at
FROM sku_availability
WHERE sku_id = ANY (@sku_ids::bigint[])
ORDER BY sku_id;

-- name: SellableBySKU :many
-- The truth, for the checkout preview: sellable units per SKU summed over warehouses. A SKU with no
-- inventory row is absent.
SELECT sku_id, sum(on_hand - reserved)::int AS available
FROM inventory
WHERE sku_id = ANY (@sku_ids::bigint[])
GROUP BY sku_id
ORDER BY sku_id;
