// Package worker wires the Temporal worker: it registers the workflows and activities on the task
// queue and prepares the namespace (search attributes) they rely on.
package worker

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/inventory"
)

// Deps are what the worker's activities need.
type Deps struct {
	Config    config.Config
	Pool      *pgxpool.Pool
	Inventory *inventory.Engine
	Temporal  client.Client
	Metrics   *metrics.Metrics
	Log       *slog.Logger
}

// New returns a worker with every workflow and activity registered; the caller starts it.
func New(c client.Client, d Deps) sdkworker.Worker {
	w := sdkworker.New(c, d.Config.TaskQueue, sdkworker.Options{})
	w.RegisterActivity(&activities.Inventory{Engine: d.Inventory})
	return w
}
