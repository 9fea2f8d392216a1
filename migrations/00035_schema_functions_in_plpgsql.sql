-- +goose Up

-- campaigns_in_force (00015) and order_event_payload (00028), with the same bodies and the same
-- answers, in PL/pgSQL instead of SQL. PostgreSQL 15 does not inline either (each has a subquery
-- or an aggregate), so as SQL functions their body was parsed and planned again on every execution
-- of the statement that calls them: every cart read and preview, every price check and every order
-- event. PL/pgSQL plans its statement once per connection and keeps the plan, so the call costs
-- its execution alone.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION campaigns_in_force(p_sku_id BIGINT, p_seller_id BIGINT) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT COALESCE(jsonb_agg(jsonb_build_object('id', c.id, 'kind', c.kind, 'value', c.value,
                                                         'currency', c.currency, 'priority', c.priority,
                                                         'stackable', c.stackable)
                                      ORDER BY c.priority DESC, c.id), '[]'::jsonb)
              FROM campaigns c
             WHERE c.starts_at <= now() AND c.ends_at > now()
               AND (c.sku_ids @> ARRAY[p_sku_id] OR (c.sku_ids IS NULL AND c.seller_id = p_seller_id)));
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION order_event_payload(p_order_id BIGINT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT jsonb_build_object(
                       'orderId', o.id, 'userId', o.user_id, 'status', o.status, 'totalMinor', o.total_minor,
                       'currency', o.currency, 'placedAt', o.created_at,
                       'items', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                                              'skuId', i.sku_id, 'sellerId', i.seller_id, 'title', i.title,
                                              'quantity', i.quantity, 'cancelledQuantity', i.cancelled_quantity,
                                              'unitPriceMinor', i.unit_price_minor) ORDER BY i.sku_id)
                                           FROM order_items i WHERE i.order_id = o.id), '[]'::jsonb))
              FROM orders o WHERE o.id = p_order_id);
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION campaigns_in_force(p_sku_id BIGINT, p_seller_id BIGINT) RETURNS jsonb
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION order_event_payload(p_order_id BIGINT) RETURNS JSONB
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
               'orderId', o.id, 'userId', o.user_id, 'status', o.status, 'totalMinor', o.total_minor,
               'currency', o.currency, 'placedAt', o.created_at,
               'items', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                                      'skuId', i.sku_id, 'sellerId', i.seller_id, 'title', i.title,
                                      'quantity', i.quantity, 'cancelledQuantity', i.cancelled_quantity,
                                      'unitPriceMinor', i.unit_price_minor) ORDER BY i.sku_id)
                                   FROM order_items i WHERE i.order_id = o.id), '[]'::jsonb))
      FROM orders o WHERE o.id = p_order_id
$$;
-- +goose StatementEnd
