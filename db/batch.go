package db

import (
	"github.com/jackc/pgx/v5"
)

// Reads that need nothing of one another go to PostgreSQL together: queued on one pgx.Batch, they
// take one round trip where one after another they take one each. A store's generated statement
// and row type are queued as they are: each row is scanned into the type's fields by position,
// which is how the store's own function scans it. The callbacks run, in the order queued, when
// the batch is read (pgx.BatchResults.Close), which returns the first error.

// QueueRows queues sql with args on b, and hands its rows to then.
func QueueRows[T any](b *pgx.Batch, sql string, args []any, then func([]T)) {
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[T])
		if err != nil {
			return err
		}
		then(got)
		return nil
	})
}

// QueueRow queues sql with args, a statement of one row at most, on b, and hands its row to then;
// found is false when it had none, which is not an error here.
func QueueRow[T any](b *pgx.Batch, sql string, args []any, then func(row T, found bool)) {
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		got, err := pgx.CollectOneRow(rows, pgx.RowToStructByPos[T])
		if NotFound(err) {
			then(got, false)
			return nil
		}
		if err != nil {
			return err
		}
		then(got, true)
		return nil
	})
}
