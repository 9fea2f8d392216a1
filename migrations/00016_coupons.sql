-- +goose Up

-- Coupons: a code the shopper types, a discount on the basket (a percentage with a cap, or a fixed
-- amount), a minimum basket, a window, a limit of redemptions in total and per shopper, optionally
-- only for some SKUs or one seller's. redeemed counts the redemptions that are not given back; it
-- moves with them in the same transaction, and the CHECK makes "never beyond the limit" the
-- database's rule too.
CREATE TABLE coupons (
    id                 BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code               TEXT        NOT NULL UNIQUE CHECK (code ~ '^[A-Z0-9_-]{3,32}$'),
    kind               TEXT        NOT NULL CHECK (kind IN ('PERCENT', 'FIXED')),
    value              BIGINT      NOT NULL CHECK (value > 0),
    max_discount_minor BIGINT      CHECK (max_discount_minor > 0),
    currency           CHAR(3)     NOT NULL,
    min_basket_minor   BIGINT      NOT NULL DEFAULT 0 CHECK (min_basket_minor >= 0),
    starts_at          TIMESTAMPTZ NOT NULL,
    ends_at            TIMESTAMPTZ NOT NULL,
    max_redemptions    INT         NOT NULL CHECK (max_redemptions > 0),
    max_per_shopper    INT         NOT NULL DEFAULT 1 CHECK (max_per_shopper > 0),
    seller_id          BIGINT      REFERENCES sellers (id),
    sku_ids            BIGINT[],
    redeemed           INT         NOT NULL DEFAULT 0,
    created_by         TEXT        NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT coupons_window CHECK (ends_at > starts_at),
    CONSTRAINT coupons_value CHECK (kind <> 'PERCENT' OR value <= 10000),
    CONSTRAINT coupons_redeemed CHECK (redeemed BETWEEN 0 AND max_redemptions)
);

-- One redemption per order: HELD from the order's creation, CONFIRMED with the order, RELEASED
-- (and counted back) when the order ends any other way.
CREATE TABLE coupon_redemptions (
    order_id       BIGINT      PRIMARY KEY REFERENCES orders (id),
    coupon_id      BIGINT      NOT NULL REFERENCES coupons (id),
    user_id        BIGINT      NOT NULL,
    discount_minor BIGINT      NOT NULL CHECK (discount_minor > 0),
    status         TEXT        NOT NULL DEFAULT 'HELD' CHECK (status IN ('HELD', 'CONFIRMED', 'RELEASED')),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX coupon_redemptions_shopper_idx ON coupon_redemptions (coupon_id, user_id) WHERE status <> 'RELEASED';

-- +goose Down
DROP TABLE coupon_redemptions;
DROP TABLE coupons;
