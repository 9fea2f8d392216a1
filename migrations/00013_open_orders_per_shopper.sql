-- +goose Up

-- A shopper's orders waiting for payment, which the open-order cap counts as each order is made
-- (InsertOrder): a few index entries per shopper, however many orders the shopper has had.
CREATE INDEX orders_user_pending_idx ON orders (user_id) WHERE status = 'PENDING_PAYMENT';

-- +goose Down
DROP INDEX orders_user_pending_idx;
