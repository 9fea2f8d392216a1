package db

import (
	"errors"

	"github.com/jackc/pgx/v5"
)

// NotFound reports whether err says that a query found no row, however it was wrapped. It is the
// one place that knows how the driver says so; each caller decides what absence means there: a
// coded NOT_FOUND refusal, an answer of its own (a conditional statement that moved nothing), or
// nothing to do.
func NotFound(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
