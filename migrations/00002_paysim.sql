-- +goose Up

-- The payment simulator's tables are not the product's: they live in the simulator's own schema
-- (paysim), created by its own migrations (payment/paysim/migrations). This file created them in
-- releases before; a database that applied it then keeps them until the simulator's first
-- migration moves them there.

-- +goose Down
