package db

import "context"

// Classes of the transaction-scoped advisory locks (pg_advisory_xact_lock(class, key)). Class 1
// is an order's reservation (reserve_order, migrations 00005 and 00010), class 2 the relays'
// turns (key 0: the outbox relay of releases before the broker, 1: the outbox relay to the
// broker, 2: the availability projection's batches); the classes below are taken with LockUser,
// keyed by user id (or seller id).
const (
	// LockOpenOrders serialises the order inserts of one shopper, for the open-order cap.
	LockOpenOrders int32 = 3
	// LockAddressBook serialises the address inserts of one user, for the address book's limit.
	LockAddressBook int32 = 4
	// LockCoupons serialises the coupon redemptions of one shopper, for a coupon's per-shopper limit.
	LockCoupons int32 = 5
	// LockWebhookEndpoints serialises the endpoint registrations of one seller, for their limit.
	LockWebhookEndpoints int32 = 6
)

// LockUser takes the lock of class on one user's rows (or one seller's), held until tx ends: a
// count and the insert it allows are decided by one transaction at a time. It is a statement of
// its own, before the conditional insert, so that the insert's snapshot is taken after the lock is
// granted and sees what the previous holder committed. Its answer is only whether it failed: on a
// Pipe it is queued, and goes with the insert (PostgreSQL still runs it first, and the insert's
// snapshot is still taken after it).
func LockUser(ctx context.Context, tx DBTX, class int32, userID int64) error {
	_, err := tx.Exec(ctx, lockUserSQL, class, userID)
	return err
}

// lockUserSQL is named as a store's statement whose answer is its error alone, as a Pipe queues.
const lockUserSQL = "-- name: LockUser :exec\nSELECT pg_advisory_xact_lock($1::int, mod($2::bigint, 2147483647)::int)"
