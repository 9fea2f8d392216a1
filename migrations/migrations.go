// Package migrations holds the numbered SQL files of the schema, embedded in the binary and
// applied by `migrate` and at `dev` start.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", which goose runs on
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Up applies every migration not yet applied. Concurrent callers (an api and a worker starting at
// once) wait for each other on a session advisory lock.
func Up(ctx context.Context, databaseURL string) (applied []string, err error) {
	return Apply(ctx, databaseURL, files, goose.DefaultTablename)
}

// Apply applies the goose migrations of fsys that versionTable does not record yet. A part that
// keeps a schema of its own (the payment simulator) applies its files with a version table of its
// own; every caller waits for the others on the same session advisory lock.
func Apply(ctx context.Context, databaseURL string, fsys fs.FS, versionTable string) (applied []string, err error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(versionTable),
		goose.WithSessionLocker(locker))
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		applied = append(applied, r.Source.Path)
	}
	return applied, nil
}
