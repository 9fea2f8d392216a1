package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/devjaeger"
	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/devtemporal"
	"github.com/marketplace/checkout/internal/dev/natsserver"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/service"
	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
)

// runDev is `make run`: it starts what is not configured (PostgreSQL, the Temporal dev server),
// prepares the database and namespace, and runs the worker and the API in this process. Ctrl-C
// stops everything it started.
func runDev(ctx context.Context, cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	binary := fs.String("binary", "", "the product's binary of this build, kept as the build's (default: checkout beside this binary)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := thisBuildsBinary(ctx, *binary)
	if err != nil {
		return err
	}
	log := slog.Default()
	// Development secrets, made once per data folder unless the environment sets them; and the API
	// and /metrics on this machine only, unless HTTP_ADDR and METRICS_ADDR say otherwise.
	cfg, err = cfg.WithDevSecrets()
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
		if cfg.Dev.PGUnixSocket {
			cfg.DatabaseURL = pg.LocalURL("checkout")
		}
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
			DynamicConfig: cfg.Dev.TemporalDevConfig, SQLiteSync: cfg.Dev.TemporalSQLiteSync, UICodecEndpoint: codecEndpoint(cfg),
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
	if err := service.Migrate(ctx, cfg); err != nil {
		return err
	}
	// One worker: its build takes the new orders (a new build's worker takes over at once, and
	// orders begun on the previous build stay pinned to it).
	cfg.SetCurrent = worker.SetCurrentAlways
	a, err := service.Connect(ctx, cfg, "checkout")
	if err != nil {
		return err
	}
	defer a.Close()
	if err := demo.Load(ctx, a.Pool()); err != nil {
		return fmt.Errorf("demo data: %w", err)
	}

	// A release too: this build's product binary is kept, and the workers of every earlier build
	// that Temporal still routes runs to run beside this one (from their kept binaries, or built
	// from the repository's history) until each has drained.
	fleet, stopFleet, err := devFleet(cfg, a.Temporal(), bin)
	if err != nil {
		return err
	}
	defer stopFleet()

	printBanner(cfg)
	err = a.RunWithMetrics(ctx, a.RunWorker, a.ServeAPI, func(ctx context.Context) error { return fleet.Run(ctx, 5*time.Second) })
	fmt.Println("\nstopped.")
	return err
}

// devFleet keeps bin, the product's binary of this build, under DATA_DIR/builds as its build's and
// returns the fleet that runs the workers of earlier builds beside it, one each, logging to
// DATA_DIR/builds/logs.
func devFleet(cfg config.Config, tc client.Client, bin string) (*builds.Fleet, func(), error) {
	store := builds.Store{Dir: filepath.Join(cfg.Dev.DataDir, "builds"), Out: os.Stdout}
	if _, err := store.Keep(workflows.BuildID, bin); err != nil {
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
