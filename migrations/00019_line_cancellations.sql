-- +goose Up

-- Units of a confirmed order's line that will not ship (damaged or lost in the warehouse, or the
-- seller cannot ship them), cancelled after payment: recorded on the line and on the
-- reservations they were taken from, refunded, put back on the shelf where the reason says so,
-- and announced.

-- The line keeps what was ordered; cancelled_quantity is how many of those units left the order.
ALTER TABLE order_items ADD COLUMN cancelled_quantity INT NOT NULL DEFAULT 0,
    ADD CONSTRAINT order_items_cancelled_valid CHECK (cancelled_quantity BETWEEN 0 AND quantity);

-- A CONFIRMED reservation keeps its quantity (the units that left the shelf at confirm);
-- cancelled_quantity of them left the order, and restocked_quantity of those went back on the
-- shelf (on_hand += units). The units still counted as sold from the row are
-- quantity - restocked_quantity.
ALTER TABLE stock_reservations ADD COLUMN cancelled_quantity INT NOT NULL DEFAULT 0,
    ADD COLUMN restocked_quantity INT NOT NULL DEFAULT 0,
    ADD CONSTRAINT stock_reservations_cancelled_valid CHECK (cancelled_quantity BETWEEN 0 AND quantity
        AND restocked_quantity BETWEEN 0 AND cancelled_quantity);

-- One row per cancellation request, unique per (order, request id): a repeated request finds
-- its row and changes nothing more. Each step stamps its time once (a conditional UPDATE on the
-- stamp being NULL), so a step run twice acts once.
CREATE TABLE line_cancellations (
    id           BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     BIGINT      NOT NULL REFERENCES orders (id),
    request_id   TEXT        NOT NULL CHECK (length(request_id) BETWEEN 1 AND 255),
    sku_id       BIGINT      NOT NULL,
    units        INT         NOT NULL CHECK (units > 0),
    reason       TEXT        NOT NULL,
    requested_by TEXT        NOT NULL,
    -- The refund: units × the line's unit price, in the order's currency.
    amount_minor BIGINT      NOT NULL CHECK (amount_minor >= 0),
    currency     CHAR(3)     NOT NULL,
    -- Where the units were taken from: [{"warehouseId": 1, "units": 1}, ...].
    allocations  JSONB       NOT NULL DEFAULT '[]',
    refunded_at  TIMESTAMPTZ,
    restocked_at TIMESTAMPTZ,
    announced_at TIMESTAMPTZ,
    -- Set while a step waits for support: {"step": ..., "error": ..., "code": ...}.
    attention    JSONB,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT line_cancellations_request_uq UNIQUE (order_id, request_id),
    CONSTRAINT line_cancellations_reason_valid CHECK (reason IN ('damaged', 'lost', 'seller_cannot_ship'))
);
CREATE INDEX line_cancellations_unfinished_idx ON line_cancellations (order_id) WHERE announced_at IS NULL;

-- The provider simulator's partial refunds are not the product's: the simulator's own migrations
-- (payment/paysim/migrations) create them in its schema. A database that applied this file in
-- releases before keeps its table until the simulator's first migration moves it there.

-- +goose Down
DROP TABLE line_cancellations;
ALTER TABLE stock_reservations DROP CONSTRAINT stock_reservations_cancelled_valid,
    DROP COLUMN restocked_quantity, DROP COLUMN cancelled_quantity;
ALTER TABLE order_items DROP CONSTRAINT order_items_cancelled_valid, DROP COLUMN cancelled_quantity;
