-- +goose Up

-- A combined batch serves many orders, and while it waits every later order of its SKUs waits
-- behind it: it must not wait long for a row that another transaction holds (a long seller
-- update, a stuck session). After lock_timeout the batch fails as a whole, having written
-- nothing, and each of its orders is reserved in a transaction of its own
-- (inventory/combiner.go), where only the orders of the held row wait for it. A batch's normal
-- waits (another process's batch, a confirm, the sweeper) last milliseconds.
ALTER FUNCTION reserve_orders(BIGINT[], DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], INT[], BIGINT[], INT[])
    SET lock_timeout = '2s';

-- +goose Down
ALTER FUNCTION reserve_orders(BIGINT[], DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], INT[], BIGINT[], INT[])
    RESET lock_timeout;
