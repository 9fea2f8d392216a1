-- +goose Up

-- Payments whose money may still be held at the provider: the payment reconciler looks at those of
-- closed orders (an authorization that arrived after the order gave up) without reading every order.
CREATE INDEX payments_unsettled_idx ON payments (order_id)
    WHERE status IN ('UNKNOWN', 'REQUIRES_ACTION', 'AUTHORIZED');

-- +goose Down
DROP INDEX payments_unsettled_idx;
