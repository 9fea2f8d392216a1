-- +goose Up

-- Campaign prices: a discount on given SKUs, or on every SKU of a seller, between starts_at and
-- ends_at. Ops keep any campaign; a seller keeps campaigns on its own SKUs only (seller_id is then
-- the seller). The price of a line applies the campaigns in force by priority, highest first: the
-- first, and the next ones while it and they stack (pricing.Compute).
CREATE TABLE campaigns (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       TEXT        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    seller_id  BIGINT      REFERENCES sellers (id),
    -- NULL: every SKU of seller_id.
    sku_ids    BIGINT[]    CHECK (sku_ids IS NULL OR cardinality(sku_ids) BETWEEN 1 AND 1000),
    -- PERCENT: value in basis points (1..10000); FIXED: value in minor units of currency.
    kind       TEXT        NOT NULL CHECK (kind IN ('PERCENT', 'FIXED')),
    value      BIGINT      NOT NULL CHECK (value > 0),
    currency   CHAR(3),
    starts_at  TIMESTAMPTZ NOT NULL,
    ends_at    TIMESTAMPTZ NOT NULL,
    priority   INT         NOT NULL DEFAULT 0,
    stackable  BOOLEAN     NOT NULL DEFAULT false,
    created_by TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT campaigns_window CHECK (ends_at > starts_at),
    CONSTRAINT campaigns_target CHECK (seller_id IS NOT NULL OR sku_ids IS NOT NULL),
    CONSTRAINT campaigns_value CHECK (kind <> 'PERCENT' OR value <= 10000),
    CONSTRAINT campaigns_currency CHECK ((kind = 'FIXED') = (currency IS NOT NULL))
);
CREATE INDEX campaigns_skus_idx ON campaigns USING gin (sku_ids);
CREATE INDEX campaigns_seller_idx ON campaigns (seller_id, ends_at) WHERE sku_ids IS NULL;

-- The campaigns in force on a SKU now, highest priority first, as pricing.Campaign reads them.
-- +goose StatementBegin
CREATE FUNCTION campaigns_in_force(p_sku_id BIGINT, p_seller_id BIGINT) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(jsonb_agg(jsonb_build_object('id', c.id, 'kind', c.kind, 'value', c.value,
                                                 'currency', c.currency, 'priority', c.priority,
                                                 'stackable', c.stackable)
                              ORDER BY c.priority DESC, c.id), '[]'::jsonb)
    FROM campaigns c
    WHERE c.starts_at <= now() AND c.ends_at > now()
      AND (c.sku_ids @> ARRAY[p_sku_id] OR (c.sku_ids IS NULL AND c.seller_id = p_seller_id))
$$;
-- +goose StatementEnd

-- What an order's line was priced with: the list price, the discount per unit and the campaigns
-- that gave it (unit_price_minor stays the price paid).
ALTER TABLE order_items
    ADD COLUMN list_price_minor BIGINT CHECK (list_price_minor >= unit_price_minor),
    ADD COLUMN campaign_ids     BIGINT[];

-- +goose Down
ALTER TABLE order_items DROP COLUMN campaign_ids, DROP COLUMN list_price_minor;
DROP FUNCTION campaigns_in_force(BIGINT, BIGINT);
DROP TABLE campaigns;
