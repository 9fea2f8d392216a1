// Package service runs the product's processes for both binaries: `checkout api` and `checkout
// worker`, each a process of its own, and `checkout-dev dev`, which runs the API and the worker in
// one process (Connect, then App's parts under RunWithMetrics); `migrate` and `audit` too.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
	"github.com/marketplace/checkout/payment/stripepay"
	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
)

// The metrics receive the inventory engine's reserve outcomes, combined batch sizes and failures.
var (
	_ inventory.Observer             = (*metrics.Metrics)(nil)
	_ inventory.BatchObserver        = (*metrics.Metrics)(nil)
	_ inventory.BatchFailureObserver = (*metrics.Metrics)(nil)
)

// App is one process's connections and shared parts.
type App struct {
	cfg      config.Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	temporal client.Client
	// codec encrypts every payload the process writes to Temporal (the client's data converter)
	// and serves the API's codec endpoint.
	codec   *codec.Codec
	metrics *metrics.Metrics
	inv     *inventory.Engine
	// gateway is the payment provider PAYMENT_PROVIDER names (api and worker start only when it is
	// set; dev names the simulator): the worker calls it, the API asks it about webhooks, which
	// webhooks checks.
	gateway  payment.Gateway
	webhooks api.WebhookVerifier
	// paysim is the simulator when it is the provider (nil otherwise): the API serves its 3-D
	// Secure page and fault switch and delivers its webhooks.
	paysim *paysim.Sim
	// features are the feature switches, one cache per process (API and worker alike), shown in
	// its metrics.
	features *features.Switches
	// tracing is the process's tracer provider (off without TRACES_ENDPOINT).
	tracing *telemetry.Tracing
	// broker is the event broker (NATS JetStream): the worker's relay publishes to it.
	broker *events.Broker
}

// Connect opens the process's connections; service names the process in its traces and on the
// broker.
func Connect(ctx context.Context, cfg config.Config, service string) (*App, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is required (or use `checkout-dev dev`)")
	}
	if cfg.TemporalAddress == "" {
		return nil, errors.New("TEMPORAL_ADDRESS is required (or use `checkout-dev dev`)")
	}
	if cfg.Events.NATSURL == "" {
		return nil, errors.New("NATS_URL is required: the event broker (or use `checkout-dev dev`)")
	}
	a := &App{cfg: cfg, log: slog.Default(), metrics: metrics.New()}
	var err error
	eo := wiring.Events(cfg, service)
	// The API's cart notices sent while disconnected go out on reconnecting; the relay's publishes
	// fail at once instead, so that it knows.
	eo.Buffered = service == "checkout-api"
	if a.broker, err = events.Connect(eo); err != nil {
		return nil, err
	}
	if a.codec, err = cfg.ServeCodec(); err != nil {
		return nil, err
	}
	if a.tracing, err = telemetry.StartTracing(telemetry.TracingOptions{Endpoint: cfg.Traces.Endpoint, Service: service,
		Version: workflows.BuildID, SampleRatio: cfg.Traces.SampleRatio, SlowAfter: cfg.Traces.SlowThreshold}); err != nil {
		return nil, err
	}
	if a.pool, err = db.Connect(ctx, cfg.DatabaseURL, cfg.DBMaxConns, db.WithTracer(a.tracing.PGXTracer())); err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if err := a.pool.Ping(ctx); err != nil {
		a.pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	tlsCfg, err := cfg.TemporalTLSConfig()
	if err != nil {
		return nil, err
	}
	if cfg.TemporalTLS.AllowPlaintext {
		a.log.Warn("TEMPORAL_ALLOW_PLAINTEXT is set: this process reaches Temporal WITHOUT TLS and without a client certificate; only a local proxy that speaks mutual TLS to the frontend makes that safe",
			"temporal_address", cfg.TemporalAddress)
	}
	temporalMetrics, err := telemetry.TemporalMetrics(a.metrics.Registry)
	if err != nil {
		return nil, err
	}
	var interceptors []interceptor.ClientInterceptor
	if tracer, err := a.tracing.TemporalInterceptor(); err != nil {
		return nil, err
	} else if tracer != nil {
		interceptors = append(interceptors, tracer)
	}
	a.temporal, err = client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress,
		Namespace: cfg.TemporalNamespace, Logger: sdklog.NewStructuredLogger(a.log), DataConverter: a.codec.DataConverter(),
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}, MetricsHandler: temporalMetrics, Interceptors: interceptors})
	if err != nil {
		a.pool.Close()
		return nil, fmt.Errorf("temporal at %s: %w", cfg.TemporalAddress, err)
	}
	inFlight := cfg.ReserveCombiningInFlight
	if inFlight == 0 {
		inFlight = inventory.DefaultBatchesInFlight
	}
	reserveInFlight, confirmInFlight := 0, 0 // combining off
	if cfg.ReserveCombining {
		reserveInFlight = inFlight
	}
	if cfg.ConfirmCombining {
		confirmInFlight = inFlight
	}
	a.inv = inventory.New(a.pool, a.metrics, inventory.WithCombining(reserveInFlight),
		inventory.WithConfirmCombining(confirmInFlight))
	a.metrics.RegisterInventoryGauges(a.inv)
	a.features = features.New(a.pool, features.Options{TTL: cfg.FeaturesCacheTTL, Log: a.log})
	a.metrics.RegisterFeatures(a.features.Snapshot)
	if cfg.PaymentProvider == config.ProviderStripe {
		a.gateway = stripepay.New(stripepay.Options{SecretKey: cfg.Stripe.SecretKey, APIURL: cfg.Stripe.APIURL,
			ReturnURL: cfg.Stripe.ReturnURL})
		a.webhooks = stripepay.Webhooks{Secret: cfg.PaymentWebhookSecret}
		a.gateway = a.tracing.TracedGateway(a.gateway)
		return a, nil
	}
	a.paysim = paysim.New(a.pool, paysim.Options{PublicBaseURL: cfg.PublicBaseURL, WebhookURL: cfg.PaymentWebhookURL,
		WebhookSecret: []byte(cfg.PaymentWebhookSecret), Log: a.log, Latency: cfg.PaysimFaults.Latency,
		FailureRate: cfg.PaysimFaults.FailureRate, HoldUntil: api.HoldUntil(a.pool)})
	a.gateway = a.tracing.TracedGateway(a.paysim)
	a.webhooks = payment.SignedWebhooks{Secret: []byte(cfg.PaymentWebhookSecret)}
	return a, nil
}

// Pool is the process's database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Temporal is the process's Temporal client.
func (a *App) Temporal() client.Client { return a.temporal }

// Close closes the process's connections.
func (a *App) Close() {
	a.broker.Close()
	if a.paysim != nil {
		a.paysim.Close()
	}
	a.temporal.Close()
	a.pool.Close()
	_ = a.tracing.Shutdown(context.Background())
}

// ServeAPI runs the REST API (and the payment simulator's pages and webhook deliveries, and the
// cart cache's listener) until ctx ends, then drains it.
func (a *App) ServeAPI(ctx context.Context) error {
	// The cart cache serves only while it is subscribed (run below) to the cart notices, which
	// every API process's cart writes send.
	subject := events.CartSubject(a.cfg.Events.Prefix)
	carts := cart.NewCache(cart.CacheOptions{Entries: a.cfg.CartCacheEntries, MaxBytes: int64(a.cfg.CartCacheMemoryMB) << 20,
		MaxAge: a.cfg.CartCacheMaxAge, Conn: a.broker.Conn(), Subject: subject, Log: a.log})
	deps := api.Deps{Options: wiring.API(a.cfg), Pool: a.pool, Inventory: a.inv, Temporal: a.temporal,
		Metrics: a.metrics, Log: a.log, Payments: a.gateway, Webhooks: a.webhooks, CartCache: carts, Codec: a.codec,
		Features: a.features, Tracer: a.tracing.TracerProvider(), CartNotices: cart.NewNotices(a.broker.Conn(), subject)}
	if a.paysim != nil {
		deps.PaymentPages, deps.PaymentFaults = a.paysim, a.paysim
	}
	srv := api.HTTPServer(a.cfg.HTTPAddr, api.New(deps))
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve(ctx, srv) })
	if a.paysim != nil {
		g.Go(func() error { return a.paysim.RunDeliverer(ctx) })
	}
	g.Go(func() error { return carts.Run(ctx) })
	return g.Wait()
}

// RunWithMetrics runs the parts of a process (the API, the worker, or both in dev) beside the
// process's one internal listener, which serves /metrics of everything in it on METRICS_ADDR; the
// API's public listener never serves it.
func (a *App) RunWithMetrics(ctx context.Context, parts ...func(context.Context) error) error {
	srv := api.HTTPServer(a.cfg.MetricsAddr, a.metrics.Handler())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve(ctx, srv) })
	for _, run := range parts {
		g.Go(func() error { return run(ctx) })
	}
	return g.Wait()
}

func serve(ctx context.Context, srv *http.Server) error {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// RunWorker runs the Temporal worker and the worker's loops until ctx ends.
func (a *App) RunWorker(ctx context.Context) error {
	if err := worker.EnsureSearchAttributes(ctx, a.temporal, a.cfg.TemporalNamespace); err != nil {
		return err
	}
	if a.cfg.SchedulesEnabled {
		// The scheduled jobs (sweeper, reconcilers, cart clean-up): created, or updated in place.
		if err := worker.EnsureSchedules(ctx, a.temporal, a.cfg); err != nil {
			return err
		}
		a.log.Info("schedules ensured", "schedules", worker.ScheduleIDs(a.cfg))
	}
	deps := worker.Deps{Config: a.cfg, Pool: a.pool, Inventory: a.inv, Gateway: a.gateway, Temporal: a.temporal,
		Metrics: a.metrics, Log: a.log, Features: a.features, Broker: a.broker}
	w := worker.New(a.temporal, deps)
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()
	if err := worker.SetCurrent(ctx, a.temporal, worker.Version(a.cfg, ""), a.cfg.SetCurrent, a.log); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { <-ctx.Done(); return nil })
	var loops []worker.Loop
	if a.cfg.WorkerLoops {
		loops = worker.Loops(deps)
	}
	for _, l := range loops {
		g.Go(func() error {
			if err := l.Run(ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("%s: %w", l.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// API is `checkout api`: the REST API's process.
func API(ctx context.Context, cfg config.Config) error {
	if err := cfg.CheckServe(); err != nil {
		return err
	}
	if err := cfg.CheckIdentityProvider(); err != nil {
		return err
	}
	a, err := Connect(ctx, cfg, "checkout-api")
	if err != nil {
		return err
	}
	defer a.Close()
	a.log.Info("api listening", "addr", cfg.HTTPAddr, "metrics", cfg.MetricsAddr, "temporal", cfg.TemporalTransport())
	return a.RunWithMetrics(ctx, a.ServeAPI)
}

// Worker is `checkout worker`: the Temporal worker's process.
func Worker(ctx context.Context, cfg config.Config) error {
	if err := cfg.CheckServe(); err != nil {
		return err
	}
	a, err := Connect(ctx, cfg, "checkout-worker")
	if err != nil {
		return err
	}
	defer a.Close()
	a.log.Info("worker started", "task_queue", cfg.TaskQueue, "metrics", cfg.MetricsAddr, "temporal", cfg.TemporalTransport())
	return a.RunWithMetrics(ctx, a.RunWorker)
}
