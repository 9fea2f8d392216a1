// Package stockstore is the inventory's store: the catalog's and the stock's queries (queries/),
// Go generated from them by sqlc (pgx/v5). Only the inventory imports it.
//
// The inventory's rules live in queries/inventory.sql. Every state change there is a conditional
// statement whose affected-row count is the decision. The lock order is the same everywhere:
// reservation rows before inventory rows, inventory rows in (sku_id, warehouse_id) order, and a
// transaction that holds inventory rows takes reservation rows only with SKIP LOCKED. No cycle of
// waits can form, so no deadlock.
package stockstore
