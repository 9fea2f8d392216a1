package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connect opens the product's pool on url. Its statements are short, parameterised index
// lookups; PostgreSQL would re-plan those taking an array (sku_id = ANY($1)) on every execution,
// which costs more than running them, so the pool keeps one generic plan per statement.
func Connect(ctx context.Context, url string, maxConns int32, opts ...Option) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	for _, o := range opts {
		o(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Option changes how a pool connects.
type Option func(*pgxpool.Config)

// WithTracer traces every statement of the pool with t (nil: none).
func WithTracer(t pgx.QueryTracer) Option {
	return func(c *pgxpool.Config) {
		if t != nil {
			c.ConnConfig.Tracer = t
		}
	}
}
