-- +goose Up

-- How many times the shopper has extended the order's hold (POST /orders/{id}/extend-hold): the
-- extension is refused once it reaches the worker's HOLD_EXTEND_MAX.
ALTER TABLE orders ADD COLUMN hold_extensions INT NOT NULL DEFAULT 0 CHECK (hold_extensions >= 0);

-- +goose Down
ALTER TABLE orders DROP COLUMN hold_extensions;
