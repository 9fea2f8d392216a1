// Package db is the data access layer: SQL in queries/, Go generated from it by sqlc (pgx/v5),
// plus the few hand-written helpers that need more than one statement.
//
// Inventory rules live in queries/inventory.sql. Every state change there is a conditional
// statement whose affected-row count is the decision. The lock order is the same everywhere:
// reservation rows before inventory rows, inventory rows in (sku_id, warehouse_id) order, and a
// transaction that holds inventory rows takes reservation rows only with SKIP LOCKED. No cycle of
// waits can form, so no deadlock.
package db
