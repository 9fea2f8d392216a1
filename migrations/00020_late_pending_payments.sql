-- +goose Up

-- The payment reconciler also looks at a closed order's payment still PENDING (an authorization
-- that reached the provider after the order gave up, whose answer the order never got).
DROP INDEX payments_unsettled_idx;
CREATE INDEX payments_unsettled_idx ON payments (order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION', 'AUTHORIZED');

-- +goose Down
DROP INDEX payments_unsettled_idx;
CREATE INDEX payments_unsettled_idx ON payments (order_id)
    WHERE status IN ('UNKNOWN', 'REQUIRES_ACTION', 'AUTHORIZED');
