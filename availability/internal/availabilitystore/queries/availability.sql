-- name: LockProjection :exec
-- One batch of stock events applied at a time, whichever worker fetched it: the sum per SKU below
-- then always sees every warehouse row a batch before it wrote.
SELECT pg_advisory_xact_lock(2, 2);

-- name: ApplyStockEvents :many
-- Each (SKU, warehouse) row takes the newest of the batch's events for it, and only when that is
-- newer than the one it holds (a redelivered or late event changes nothing). Returns the SKUs
-- whose rows changed.
WITH batch AS (
    SELECT unnest(@sku_ids::bigint[]) AS sku_id, unnest(@warehouse_ids::int[]) AS warehouse_id,
           unnest(@sellable::int[]) AS sellable, unnest(@event_ids::bigint[]) AS event_id
), incoming AS (
    SELECT DISTINCT ON (sku_id, warehouse_id) sku_id, warehouse_id, sellable, event_id
      FROM batch
     ORDER BY sku_id, warehouse_id, event_id DESC
)
INSERT INTO sku_warehouse_availability AS w (sku_id, warehouse_id, sellable, last_event_id, updated_at)
SELECT sku_id, warehouse_id, sellable, event_id, now() FROM incoming
ON CONFLICT (sku_id, warehouse_id) DO UPDATE
   SET sellable = EXCLUDED.sellable, last_event_id = EXCLUDED.last_event_id, updated_at = EXCLUDED.updated_at
 WHERE w.last_event_id < EXCLUDED.last_event_id
RETURNING w.sku_id;

-- name: RefreshSKUAvailability :execrows
-- The cart's figure: a SKU's sellable units over its warehouses.
INSERT INTO sku_availability AS a (sku_id, available, last_event_id, updated_at)
SELECT sku_id, sum(sellable)::int, max(last_event_id), now()
  FROM sku_warehouse_availability
 WHERE sku_id = ANY (@sku_ids::bigint[])
 GROUP BY sku_id
ON CONFLICT (sku_id) DO UPDATE
   SET available = EXCLUDED.available, last_event_id = GREATEST(a.last_event_id, EXCLUDED.last_event_id),
       updated_at = EXCLUDED.updated_at;

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

-- name: RebuildAvailability :exec
-- The projection recomputed from the inventory itself, every row (ops, after the projector fell
-- behind what the stream keeps; tests).
WITH truth AS (
    INSERT INTO sku_warehouse_availability AS w (sku_id, warehouse_id, sellable, updated_at)
    SELECT sku_id, warehouse_id, on_hand - reserved, now() FROM inventory
    ON CONFLICT (sku_id, warehouse_id) DO UPDATE SET sellable = EXCLUDED.sellable, updated_at = EXCLUDED.updated_at
    RETURNING w.sku_id, w.sellable
)
INSERT INTO sku_availability AS a (sku_id, available, updated_at)
SELECT sku_id, sum(sellable)::int, now() FROM truth GROUP BY sku_id
ON CONFLICT (sku_id) DO UPDATE SET available = EXCLUDED.available, updated_at = EXCLUDED.updated_at;
