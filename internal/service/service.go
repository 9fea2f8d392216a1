package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/devjaeger"
	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/devtemporal"
	"github.com/marketplace/checkout/internal/dev/natsserver"
	"github.com/marketplace/checkout/internal/dev/pgserver"
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

// app is one process's connections and shared parts.
type app struct {
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

// connect opens the process's connections; service names the process in its traces and on the
// broker.
func connect(ctx context.Context, cfg config.Config, service string) (*app, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is required (or use `checkout dev`)")
	}
	if cfg.TemporalAddress == "" {
		return nil, errors.New("TEMPORAL_ADDRESS is required (or use `checkout dev`)")
	}
	if cfg.Events.NATSURL == "" {
		return nil, errors.New("NATS_URL is required: the event broker (or use `checkout dev`)")
	}
	a := &app{cfg: cfg, log: slog.Default(), metrics: metrics.New()}
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
	inFlight := 0 // combining off
	if cfg.ReserveCombining {
		inFlight = cfg.ReserveCombiningInFlight
		if inFlight == 0 {
			inFlight = inventory.DefaultBatchesInFlight
		}
	}
	a.inv = inventory.New(a.pool, a.metrics, inventory.WithCombining(inFlight))
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

func (a *app) close() {
	a.broker.Close()
	if a.paysim != nil {
		a.paysim.Close()
	}
	a.temporal.Close()
	a.pool.Close()
	_ = a.tracing.Shutdown(context.Background())
}

// serveAPI runs the REST API (and the payment simulator's pages and webhook deliveries, and the
// cart cache's listener) until ctx ends, then drains it.
func (a *app) serveAPI(ctx context.Context) error {
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

// runWithMetrics runs the parts of a process (the API, the worker, or both in dev) beside the
// process's one internal listener, which serves /metrics of everything in it on METRICS_ADDR; the
// API's public listener never serves it.
func (a *app) runWithMetrics(ctx context.Context, parts ...func(context.Context) error) error {
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

// runWorker runs the Temporal worker and the worker's loops until ctx ends.
func (a *app) runWorker(ctx context.Context) error {
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

func runAPI(ctx context.Context, cfg config.Config) error {
	if err := cfg.CheckServe(); err != nil {
		return err
	}
	if err := cfg.CheckIdentityProvider(); err != nil {
		return err
	}
	a, err := connect(ctx, cfg, "checkout-api")
	if err != nil {
		return err
	}
	defer a.close()
	a.log.Info("api listening", "addr", cfg.HTTPAddr, "metrics", cfg.MetricsAddr, "temporal", cfg.TemporalTransport())
	return a.runWithMetrics(ctx, a.serveAPI)
}

func runWorker(ctx context.Context, cfg config.Config) error {
	if err := cfg.CheckServe(); err != nil {
		return err
	}
	a, err := connect(ctx, cfg, "checkout-worker")
	if err != nil {
		return err
	}
	defer a.close()
	a.log.Info("worker started", "task_queue", cfg.TaskQueue, "metrics", cfg.MetricsAddr, "temporal", cfg.TemporalTransport())
	return a.runWithMetrics(ctx, a.runWorker)
}

// runDev is `make run`: it starts what is not configured (PostgreSQL, the Temporal dev server),
// prepares the database and namespace, and runs the worker and the API in this process. Ctrl-C
// stops everything it started.
func runDev(ctx context.Context, cfg config.Config) error {
	log := slog.Default()
	// Development secrets, made once per data folder unless the environment sets them; and the API
	// and /metrics on this machine only, unless HTTP_ADDR and METRICS_ADDR say otherwise.
	cfg, err := cfg.WithDevSecrets()
	if err != nil {
		return err
	}
	cfg.HTTPAddr = devAddr("HTTP_ADDR", cfg.HTTPAddr, config.DefaultHTTPAddr, os.Getenv)
	cfg.MetricsAddr = devAddr("METRICS_ADDR", cfg.MetricsAddr, config.DefaultMetricsAddr, os.Getenv)
	if len(cfg.TemporalUIOrigins) == 0 && cfg.Dev.TemporalUIPort > 0 {
		cfg.TemporalUIOrigins = []string{config.UIOrigin(cfg.PublicBaseURL, cfg.Dev.TemporalUIPort)}
	}
	if cfg.PaymentProvider == "" {
		cfg.PaymentProvider = config.ProviderPaysim
	}
	// The dev server takes any client on loopback; its worker reads payloads in clear too, so that
	// the bare CLI can drive orders on a laptop.
	cfg.CodecAcceptPlaintext = true
	// A seller's webhook receiver on this machine (docs/events.md's) gets its events.
	cfg.Webhooks.AllowPrivateTargets = true
	if cfg.DatabaseURL == "" {
		pg, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(cfg.Dev.DataDir, "pg"), Port: cfg.Dev.PGPort,
			Database: "checkout", Log: openLog(cfg.Dev.DataDir, "postgres.log")})
		if err != nil {
			return fmt.Errorf("private PostgreSQL: %w", err)
		}
		defer pg.Stop()
		cfg.DatabaseURL = pg.URL("checkout")
		log.Info("postgres started", "url", cfg.DatabaseURL, "data", pg.Dir)
	}
	if cfg.Dev.PrometheusPort > 0 && cfg.Dev.TemporalMetricsPort == 0 && cfg.TemporalAddress == "" {
		// A port known in advance, so that Prometheus scrapes the dev server too.
		if cfg.Dev.TemporalMetricsPort, err = pgserver.FreePort(); err != nil {
			return err
		}
	}
	if cfg.Events.NATSURL == "" {
		ns, err := natsserver.Start(ctx, natsserver.Options{Binary: cfg.Dev.NATSServer, Name: "checkout-dev",
			Dir: filepath.Join(cfg.Dev.DataDir, "nats"), Port: cfg.Dev.NATSPort, MonitorPort: cfg.Dev.NATSMonitorPort,
			Log: openLog(cfg.Dev.DataDir, "nats.log")})
		if err != nil {
			return fmt.Errorf("event broker: %w", err)
		}
		defer ns.Stop()
		cfg.Events.NATSURL = ns.URL
		log.Info("nats-server started", "url", ns.URL, "monitoring", ns.MonitorURL, "data", ns.Dir)
	}
	temporalStarted := cfg.TemporalAddress == ""
	if temporalStarted {
		ts, err := devtemporal.Start(ctx, devtemporal.Options{CLI: cfg.Dev.TemporalCLI,
			DBFile: filepath.Join(cfg.Dev.DataDir, "temporal.db"), Port: cfg.Dev.TemporalPort, UIPort: cfg.Dev.TemporalUIPort,
			MetricsPort: cfg.Dev.TemporalMetricsPort, SearchAttributes: worker.SearchAttributeTypes(),
			DynamicConfig: cfg.Dev.TemporalDevConfig, UICodecEndpoint: codecEndpoint(cfg),
			Namespace: cfg.TemporalNamespace, Log: openLog(cfg.Dev.DataDir, "temporal.log")})
		if err != nil {
			return fmt.Errorf("temporal dev server: %w", err)
		}
		defer ts.Stop()
		cfg.TemporalAddress = ts.Address
		log.Info("temporal dev server started", "address", ts.Address)
	}
	if cfg.Traces.Endpoint == "" && cfg.Dev.JaegerUIPort > 0 {
		// Traces to the pinned Jaeger, every one of them unless TRACES_SAMPLE_RATIO says otherwise.
		jaeger, err := devjaeger.Start(ctx, devjaeger.Options{Bin: cfg.Dev.JaegerBin, Dir: filepath.Join(cfg.Dev.DataDir, "jaeger"),
			UIPort: cfg.Dev.JaegerUIPort, OTLPPort: cfg.Dev.JaegerOTLPPort, Log: openLog(cfg.Dev.DataDir, "jaeger.log")})
		if err != nil {
			return fmt.Errorf("jaeger: %w", err)
		}
		defer jaeger.Stop()
		cfg.Traces.Endpoint = jaeger.TracesEndpoint
		if os.Getenv("TRACES_SAMPLE_RATIO") == "" {
			cfg.Traces.SampleRatio = 1
		}
		log.Info("jaeger started", "ui", jaeger.URL, "otlp", jaeger.TracesEndpoint)
	}
	if cfg.Dev.PrometheusPort > 0 {
		prom, err := startPrometheus(ctx, cfg, temporalStarted)
		if err != nil {
			return fmt.Errorf("prometheus: %w", err)
		}
		defer prom.Stop()
		log.Info("prometheus started", "url", prom.URL, "data", filepath.Join(cfg.Dev.DataDir, "prometheus"))
	}
	// As `migrate` applies them: the product's migrations, then the simulator's (the local stack's
	// provider).
	if err := runMigrate(ctx, cfg); err != nil {
		return err
	}
	// One worker: its build takes the new orders (a new build's worker takes over at once, and
	// orders begun on the previous build stay pinned to it).
	cfg.SetCurrent = worker.SetCurrentAlways
	a, err := connect(ctx, cfg, "checkout")
	if err != nil {
		return err
	}
	defer a.close()
	if err := demo.Load(ctx, a.pool); err != nil {
		return fmt.Errorf("demo data: %w", err)
	}

	// A release too: this build's binary is kept, and the workers of every earlier build that
	// Temporal still routes runs to run beside this one (from their kept binaries, or built from
	// the repository's history) until each has drained.
	fleet, stopFleet, err := devFleet(cfg, a.temporal)
	if err != nil {
		return err
	}
	defer stopFleet()

	printBanner(cfg)
	err = a.runWithMetrics(ctx, a.runWorker, a.serveAPI, func(ctx context.Context) error { return fleet.Run(ctx, 5*time.Second) })
	fmt.Println("\nstopped.")
	return err
}

// devFleet keeps this binary under DATA_DIR/builds as its build's and returns the fleet that runs
// the workers of earlier builds beside it, one each, logging to DATA_DIR/builds/logs.
func devFleet(cfg config.Config, tc client.Client) (*builds.Fleet, func(), error) {
	store := builds.Store{Dir: filepath.Join(cfg.Dev.DataDir, "builds"), Out: os.Stdout}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	if _, err := store.Keep(workflows.BuildID, exe); err != nil {
		return nil, nil, fmt.Errorf("keep this build's binary: %w", err)
	}
	sup := &cluster.Supervisor{Dir: store.Dir, Out: os.Stdout}
	f := &builds.Fleet{Store: store, Sup: sup, Temporal: tc, Deployment: cfg.DeploymentName, Workers: 1,
		Worker: func(build string, _ int, bin string) cluster.Process {
			return cluster.Process{Name: "worker-" + build, Service: "worker", Path: bin, Args: []string{"worker"}, Env: workerEnv(cfg)}
		},
		QueryWindow: cfg.Dev.BuildsQueryWindow, Out: os.Stdout}
	f.SetCurrent(workflows.BuildID)
	return f, sup.Stop, nil
}

// workerEnv is the environment a worker process of this stack runs with: where the database and
// Temporal are, the secrets, the saga's settings; /metrics on a loopback port of its own.
func workerEnv(cfg config.Config) []string {
	env := []string{
		"DATABASE_URL=" + cfg.DatabaseURL,
		"TEMPORAL_ADDRESS=" + cfg.TemporalAddress,
		"TEMPORAL_NAMESPACE=" + cfg.TemporalNamespace,
		"TEMPORAL_TASK_QUEUE=" + cfg.TaskQueue,
		"TEMPORAL_DEPLOYMENT_NAME=" + cfg.DeploymentName,
		"AUTH_JWT_SECRET=" + cfg.JWTSecret,
		"PAYMENT_WEBHOOK_SECRET=" + cfg.PaymentWebhookSecret,
		"TEMPORAL_CODEC_KEY=" + base64.StdEncoding.EncodeToString(cfg.CodecKey.Secret),
		"TEMPORAL_CODEC_KID=" + cfg.CodecKey.ID,
		"PAYMENT_PROVIDER=" + cfg.PaymentProvider,
		"NATS_URL=" + cfg.Events.NATSURL,
		"EVENTS_PREFIX=" + cfg.Events.Prefix,
		"PUBLIC_BASE_URL=" + cfg.PublicBaseURL,
		"PAYMENT_WEBHOOK_URL=" + cfg.PaymentWebhookURL,
		"HOLD_TTL=" + cfg.HoldTTL.String(),
		"STEP_RETRY_WINDOW=" + cfg.StepRetryWindow.String(),
		"METRICS_ADDR=127.0.0.1:0",
		"LOG_LEVEL=" + cfg.LogLevel,
		"TRACES_ENDPOINT=" + cfg.Traces.Endpoint,
		"TRACES_SAMPLE_RATIO=" + strconv.FormatFloat(cfg.Traces.SampleRatio, 'g', -1, 64),
		"TRACES_SLOW_THRESHOLD=" + cfg.Traces.SlowThreshold.String(),
		// The local stack's dev server listens on loopback without TLS and its worker takes what
		// the open dev server is sent in clear: the workers of earlier builds run as it does.
		"TEMPORAL_ALLOW_PLAINTEXT=true",
		"TEMPORAL_CODEC_ACCEPT_PLAINTEXT=true",
	}
	var older []string
	for _, k := range cfg.CodecKeys {
		older = append(older, k.ID+"="+base64.StdEncoding.EncodeToString(k.Secret))
	}
	return append(env, "TEMPORAL_CODEC_KEYS="+strings.Join(older, ","))
}

// startPrometheus runs the distribution's Prometheus on loopback with the product's rules, scraping
// this process's /metrics and, when dev started it, the Temporal dev server's.
func startPrometheus(ctx context.Context, cfg config.Config, withTemporal bool) (*devprometheus.Server, error) {
	targets := map[string][]string{"checkout": {cfg.MetricsTarget()}}
	if withTemporal && cfg.Dev.TemporalMetricsPort > 0 {
		targets["temporal"] = []string{"127.0.0.1:" + strconv.Itoa(cfg.Dev.TemporalMetricsPort)}
	}
	return devprometheus.Start(ctx, devprometheus.Options{Dir: filepath.Join(cfg.Dev.DataDir, "prometheus"),
		Port: cfg.Dev.PrometheusPort, Targets: targets, Rules: []string{devprometheus.RulesFile},
		Log: openLog(cfg.Dev.DataDir, "prometheus.log")})
}

// devAddr is where `dev` listens for the setting key (default def): on this machine only,
// unless the setting is set.
func devAddr(key, configured, def string, getenv func(string) string) string {
	switch {
	case getenv(key) != "":
		return configured
	case strings.HasPrefix(def, ":"):
		return "127.0.0.1" + def
	}
	return def
}

// codecEndpoint is the API's codec endpoint, which the Temporal UI asks to decode payloads.
func codecEndpoint(cfg config.Config) string {
	return strings.TrimRight(cfg.PublicBaseURL, "/") + "/codec"
}

func openLog(dir, name string) *os.File {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil
	}
	return f
}

func printBanner(cfg config.Config) {
	keys := cfg.AuthKeys()
	token := func(p auth.Principal) string {
		t, err := keys.Mint(p, cfg.JWTMaxLifetime)
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return t
	}
	prom := "off (make run PROMETHEUS=1, or PROMETHEUS_PORT)"
	if cfg.Dev.PrometheusPort > 0 {
		prom = "http://127.0.0.1:" + strconv.Itoa(cfg.Dev.PrometheusPort) + "   (rules: deploy/prometheus/rules.yml)"
	}
	traces := "off (TRACES_ENDPOINT, or JAEGER_UI_PORT)"
	if cfg.Dev.JaegerUIPort > 0 && strings.HasPrefix(cfg.Traces.Endpoint, "http://127.0.0.1:"+strconv.Itoa(cfg.Dev.JaegerOTLPPort)+"/") {
		traces = "http://localhost:" + strconv.Itoa(cfg.Dev.JaegerUIPort) + "   (Jaeger: every order's trace)"
	} else if cfg.Traces.Endpoint != "" {
		traces = "sent to " + cfg.Traces.Endpoint
	}
	ui := "(external Temporal: see its own UI)"
	if cfg.Dev.TemporalUIPort > 0 {
		ui = "http://localhost:" + strconv.Itoa(cfg.Dev.TemporalUIPort)
	}
	fmt.Printf(`
checkout is running (Ctrl-C stops everything)

  API           %s
  metrics       %s
  Prometheus    %s
  Temporal UI   %s
  Traces        %s
  Temporal      %s   namespace %s   (plaintext, no authentication: this machine only)
  PostgreSQL    %s
  events        %s   stream %s   (bin/checkout events tail; monitoring %s)

  shopper 7     export TOKEN=%s
  shopper 8     %s
  seller 42     %s
  support       %s

  try:  curl -s -H "Authorization: Bearer $TOKEN" %s/api/v1/addresses

  Orders' payloads in Temporal are encrypted. To read them decoded in the UI, sign in with the
  support token at %s/session (see docs/runbook.md, "Decoding orders in the UI").

`, cfg.PublicBaseURL, cfg.MetricsURL(), prom, ui, traces, cfg.TemporalAddress, cfg.TemporalNamespace, cfg.DatabaseURL,
		cfg.Events.NATSURL, events.StreamName(cfg.Events.Prefix), "http://127.0.0.1:"+strconv.Itoa(cfg.Dev.NATSMonitorPort),
		token(auth.Principal{UserID: 7, Role: auth.RoleShopper}),
		token(auth.Principal{UserID: 8, Role: auth.RoleShopper}),
		token(auth.Principal{UserID: 1042, Role: auth.RoleSeller, SellerID: 42}),
		token(auth.Principal{UserID: 900, Role: auth.RoleSupport}),
		cfg.PublicBaseURL, codecEndpoint(cfg))
}
