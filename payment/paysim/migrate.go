package paysim

import (
	"context"
	"embed"
	"io/fs"

	"github.com/marketplace/checkout/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// VersionTable records which of the simulator's migrations a database has applied, apart from the
// product's goose_db_version.
const VersionTable = "paysim_goose_db_version"

// Migrate applies the simulator's own migrations (migrations/*.sql: schema paysim) to the
// database at databaseURL, wherever the simulator runs on it; the product's migrations create
// none of its tables. Concurrent callers wait for each other, as for the product's migrations.
func Migrate(ctx context.Context, databaseURL string) (applied []string, err error) {
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return migrations.Apply(ctx, databaseURL, files, VersionTable)
}
