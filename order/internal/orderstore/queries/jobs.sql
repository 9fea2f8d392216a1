-- name: PaymentsToReconcile :many
-- The payment reconciler's batch: payments of open orders whose outcome the checkout does not
-- know: UNKNOWN (a provider call timed out), still PENDING pending_seconds after they were
-- written (the authorize may have been lost), or waiting for 3-D Secure that long (its webhook
-- may have been lost while the shopper approved). Also every open order orphan_after_seconds
-- past its hold (or, without one, past its creation), whatever its payment: if its workflow is
-- gone, nobody else will end it; every order the reconciler ended as ORPHANED whose payment is
-- not reversed yet (a run that stopped between the two); and every order that failed or was
-- cancelled within late_seconds whose payment may still hold money (its authorization arrived
-- after the order's compensation found nothing to reverse), a payment still PENDING included (an
-- authorization whose answer the order never got before it gave up). A closed order's PENDING or
-- UNKNOWN payment the provider was found to hold nothing for is settled (nothing_held_at,
-- SettleNothingHeld) and off the list. order_id, when not 0, limits the
-- batch to that order (and then a late capture counts too). Keyset-paged by order id, so a
-- payment the provider never saw is asked about once per run and cannot starve the others.
SELECT o.id AS order_id, o.status AS order_status, coalesce(o.failure_code, '')::text AS failure_code,
       coalesce(p.status, 'NONE')::text AS status, o.workflow_id
FROM orders o
LEFT JOIN payments p ON p.order_id = o.id
WHERE o.id > @after_order_id
  AND (@order_id::bigint = 0 OR o.id = @order_id::bigint)
  AND ((o.status IN ('PENDING_PAYMENT', 'NEEDS_ATTENTION')
        AND (p.status = 'UNKNOWN'
             OR (p.status IN ('PENDING', 'REQUIRES_ACTION')
                 AND p.updated_at < now() - make_interval(secs => @pending_seconds::float8))
             OR coalesce(o.hold_expires_at, o.created_at) < now() - make_interval(secs => @orphan_after_seconds::float8)))
       OR (o.status = 'FAILED' AND o.failure_code = 'ORPHANED'
           AND (p.status IN ('REQUIRES_ACTION', 'AUTHORIZED', 'CAPTURED')
                OR (p.status IN ('PENDING', 'UNKNOWN') AND p.nothing_held_at IS NULL)))
       OR (o.status IN ('FAILED', 'CANCELLED')
           AND (p.status IN ('REQUIRES_ACTION', 'AUTHORIZED')
                OR (p.status IN ('PENDING', 'UNKNOWN') AND p.nothing_held_at IS NULL)
                OR (@order_id::bigint <> 0 AND p.status = 'CAPTURED'))
           AND o.updated_at > now() - make_interval(secs => @late_seconds::float8)))
ORDER BY o.id
LIMIT @batch_size;

-- name: SettleNothingHeld :execrows
-- Settles the payment of a failed or cancelled order whose key the provider never saw, once the
-- order has not changed for longer than any call of its could still take to reach the provider
-- (settle_seconds): nothing is held, and the payment leaves the reconciler's list. A payment the
-- provider has answered since (its status moved on) is not touched.
UPDATE payments p
   SET nothing_held_at = now(), updated_at = now()
  FROM orders o
 WHERE p.order_id = @order_id AND o.id = p.order_id
   AND o.status IN ('FAILED', 'CANCELLED')
   AND o.updated_at < now() - make_interval(secs => @settle_seconds::float8)
   AND p.status IN ('PENDING', 'UNKNOWN') AND p.nothing_held_at IS NULL;

-- name: LineCancellationsToFinish :many
-- The payment reconciler's line cancellations to look at: recorded more than older_than_seconds
-- ago and not finished (announced), whether their refund is done or not. The reconciler finishes
-- those whose workflow no longer runs. Keyset-paged by id.
SELECT id, order_id, request_id, coalesce(workflow_id, '')::text AS workflow_id
FROM line_cancellations
WHERE announced_at IS NULL AND id > @after_id
  AND created_at < now() - make_interval(secs => @older_than_seconds::float8)
ORDER BY id
LIMIT @batch_size;
