-- name: CouponByCode :one
-- A coupon as the shopper's order sees it now, with how many of its redemptions the shopper
-- holds.
SELECT c.id, c.code, c.kind, c.value, c.max_discount_minor, c.currency::text AS currency, c.min_basket_minor,
       c.starts_at, c.ends_at, c.max_redemptions, c.max_per_shopper, c.seller_id, c.sku_ids, c.redeemed,
       now()::timestamptz AS now,
       (SELECT count(*) FROM coupon_redemptions r
         WHERE r.coupon_id = c.id AND r.user_id = @user_id AND r.status <> 'RELEASED')::int AS shopper_redeemed
FROM coupons c
WHERE c.code = @code;

-- name: RedeemCoupon :one
-- Spends one redemption of the coupon for the order, in the order's transaction: one conditional
-- statement decides (never beyond the limit, only within the window), and the redemption row,
-- unique per order, is written with it. No row: the coupon is used up, used by this shopper as
-- often as it allows, or no longer valid. The caller holds the shopper's LockUser(LockCoupons),
-- so the shopper's own count cannot pass its limit by concurrent orders either.
WITH spent AS (
    UPDATE coupons c
       SET redeemed = c.redeemed + 1
     WHERE c.id = @coupon_id AND c.redeemed < c.max_redemptions AND c.starts_at <= now() AND c.ends_at > now()
       AND (SELECT count(*) FROM coupon_redemptions r
             WHERE r.coupon_id = c.id AND r.user_id = @user_id AND r.status <> 'RELEASED') < c.max_per_shopper
    RETURNING c.id
)
INSERT INTO coupon_redemptions (order_id, coupon_id, user_id, discount_minor)
SELECT @order_id, spent.id, @user_id, @discount_minor FROM spent
RETURNING coupon_id;

-- name: SettleCouponRedemption :exec
-- The order's end settles its redemption, once: CONFIRMED with the order, RELEASED (and counted
-- back, so the coupon serves the next shopper) when it ends any other way.
WITH settled AS (
    UPDATE coupon_redemptions
       SET status = CASE WHEN @order_status::text = 'CONFIRMED' THEN 'CONFIRMED' ELSE 'RELEASED' END,
           updated_at = now()
     WHERE order_id = @order_id AND status = 'HELD'
    RETURNING coupon_id, status
)
UPDATE coupons c SET redeemed = c.redeemed - 1
FROM settled s
WHERE c.id = s.coupon_id AND s.status = 'RELEASED';

-- name: CouponOfOrder :one
SELECT c.id, c.code, r.discount_minor, r.status
FROM coupon_redemptions r JOIN coupons c ON c.id = r.coupon_id
WHERE r.order_id = @order_id;

-- name: InsertCoupon :one
INSERT INTO coupons (code, kind, value, max_discount_minor, currency, min_basket_minor, starts_at, ends_at,
                     max_redemptions, max_per_shopper, seller_id, sku_ids, created_by)
VALUES (@code, @kind, @value, sqlc.narg(max_discount_minor), @currency, @min_basket_minor, @starts_at, @ends_at,
        @max_redemptions, @max_per_shopper, sqlc.narg(seller_id), sqlc.narg(sku_ids)::bigint[], @created_by)
RETURNING *;

-- name: ListCoupons :many
SELECT * FROM coupons WHERE ends_at > now() ORDER BY id DESC LIMIT 500;
