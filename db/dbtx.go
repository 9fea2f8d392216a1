package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what a store runs its statements on: the pool, or a transaction of the caller's. The
// areas' functions take one, so that a decision spanning areas (an order's insert and its
// coupon's redemption) is one transaction; every store's own DBTX is the same interface.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}
