// Package config reads the one Config of the binary from environment variables, with the
// documented defaults of a local machine, and validates it at start.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
)

// Config is every setting of the binary. Each field has an environment variable; docs/settings.md lists them.
type Config struct {
	// DatabaseURL points at PostgreSQL. Empty in `dev` means: start the private cluster.
	DatabaseURL string
	DBMaxConns  int32

	// TemporalAddress points at the Temporal frontend. Empty in `dev` means: start the dev server.
	TemporalAddress string
	// TemporalTLS is the client certificate every dial to Temporal presents (mutual TLS).
	TemporalTLS       TemporalTLS
	TemporalNamespace string
	TaskQueue         string
	// DeploymentName is the worker deployment the worker's versions belong to (default: the task
	// queue); SetCurrent says when a starting worker makes its version the current one.
	DeploymentName string
	SetCurrent     string

	HTTPAddr string
	// PublicBaseURL is how shoppers' browsers reach the API; the 3-D Secure redirect uses it.
	PublicBaseURL string

	HoldTTL time.Duration
	// StepRetryWindow bounds the retries of an order's steps after the shopper's answer; then
	// the order waits in NEEDS_ATTENTION for support.
	StepRetryWindow time.Duration
	// ParkedEscalateAfter and ParkedGiveUpAfter bound how long an order waits for support once a
	// step first parked it: escalated (the Escalated search attribute, the CheckoutOrdersEscalated
	// alert) after the first, given up after the second (FAILED ATTENTION_EXPIRED: stock back,
	// payment voided), before the provider lets the authorization expire. The worker applies them.
	ParkedEscalateAfter time.Duration
	ParkedGiveUpAfter   time.Duration
	// HoldExtendBy, HoldExtendWindow and HoldExtendMax are the shopper's hold extension: by how
	// much, only within the hold's last HoldExtendWindow, at most HoldExtendMax times (0: never).
	// The worker applies them.
	HoldExtendBy     time.Duration
	HoldExtendWindow time.Duration
	HoldExtendMax    int
	// OrdersMaxOpenPerShopper caps a shopper's orders waiting for payment (0: no cap). The worker
	// applies it in PostgreSQL as each order row is written.
	OrdersMaxOpenPerShopper int
	// OrdersMaxInFlight bounds the orders one API process is placing at once (0: no bound), and
	// OrdersAdmitMaxLatency the recent round trip of placing one, Update-with-Start to the answer
	// (0: not watched): past it, the process keeps in flight only what it answers in that time.
	// Beyond either, POST /orders answers 503 BUSY at once, before anything is reserved or
	// started: a shopper told to come back shortly rather than kept waiting.
	OrdersMaxInFlight     int
	OrdersAdmitMaxLatency time.Duration
	// WorkflowTaskTimeout is the workflow task timeout of the workflows the API starts (orders,
	// line cancellations, a late payment's reversal): how long Temporal waits for a worker's
	// answer to one of their tasks before it hands the task out again. A task recorded as started
	// that no worker received (a poll's answer lost) costs its workflow this long.
	WorkflowTaskTimeout time.Duration
	// FeaturesCacheTTL is how long a process trusts its last read of the feature switches (0:
	// every use reads them).
	FeaturesCacheTTL time.Duration

	// JWTSecret signs and checks the bearer tokens; its kid is JWTKeyID (empty: tokens carry none).
	// JWTKeys are older keys still accepted by kid (a rotation); tokens must name JWTIssuer and
	// JWTAudience when they are set, and live no longer than JWTMaxLifetime.
	JWTSecret      string
	JWTKeyID       string
	JWTKeys        []auth.Key
	JWTIssuer      string
	JWTAudience    string
	JWTMaxLifetime time.Duration
	// OIDCIssuer, OIDCAudience and OIDCJWKSURL name the identity provider, whose RS256 or ES256
	// tokens the API verifies against the JWKS; with it set, every token comes from it and no
	// HS256 token is accepted, so no holder of the shared secret speaks for anyone. JWTRoles is
	// what AUTH_JWT_ROLES, a setting no longer read, still names: an api outside dev refuses to
	// start on it rather than be thought to accept what it names.
	OIDCIssuer, OIDCAudience, OIDCJWKSURL string
	JWTRoles                              []string
	PaymentWebhookSecret                  string
	// CodecKey encrypts every payload the product writes to Temporal (AES-256: 32 bytes, given in
	// base64), named by its CodecKey.ID in each payload; CodecKeys are older keys, kept to decrypt
	// what they encrypted until no run needs them (a rotation).
	CodecKey  codec.Key
	CodecKeys []codec.Key
	// CodecEncrypt false writes payloads in clear while still reading encrypted ones: the first
	// phase of introducing the codec while workers of a release without it still run.
	CodecEncrypt bool
	// CodecAcceptPlaintext lets the process decode payloads that are not encrypted: `checkout-dev dev`
	// (and the transition from a release without the codec) only. Otherwise api and worker refuse
	// them, so an input that no holder of the key wrote fails instead of being obeyed.
	CodecAcceptPlaintext bool
	// TemporalUIOrigins are the Temporal UI's origins (scheme://host:port), which may call the
	// API's codec endpoint from a browser with support's session cookie.
	TemporalUIOrigins []string
	// PaymentProvider names the payment provider: paysim, the simulator, or stripe. api and worker
	// need it set; dev runs the simulator when it is not.
	PaymentProvider string
	// Stripe is the Stripe account, when PaymentProvider is stripe (PAYMENT_WEBHOOK_SECRET is then
	// its webhook endpoint's signing secret).
	Stripe Stripe
	// PaymentWebhookURL is where the provider simulator delivers its signed webhooks.
	PaymentWebhookURL string

	// Dev is the dev stack's settings (`dev`, `make run`); api and worker read none of them.
	Dev DevStack
	// PaysimFaults are the payment simulator's faults in this process, for tests and load runs.
	PaysimFaults PaysimFaults

	// MetricsAddr is the internal listener of the process's /metrics (api, worker and dev alike),
	// a port of its own so that a deployment keeps it off the public one.
	MetricsAddr string

	// Carts: lines per cart, units per line (on top of each SKU's maxPerOrder), idle lifetime.
	CartMaxLines        int
	CartMaxUnitsPerLine int
	CartIdleTTL         time.Duration
	// CartViewCacheTTL is how long the cart page reuses a SKU's price and stock hint (0: never).
	CartViewCacheTTL time.Duration
	// CartCacheEntries bounds the API process's cache of cart documents (0: no cache), and
	// CartCacheMemoryMB the estimated memory of what it holds.
	CartCacheEntries  int
	CartCacheMemoryMB int
	// CartCacheMaxAge bounds how long a cached cart is served: the bound on a change no API
	// process announced (the janitor's, one made by hand).
	CartCacheMaxAge time.Duration
	// AuthTokenCacheEntries bounds the API process's cache of verified bearer tokens (0: none).
	AuthTokenCacheEntries int
	// RateLimits are the API's rate limits (per API process, in memory). TrustedProxies are the
	// proxies whose X-Forwarded-For names the client; with none, the connection's peer is the
	// client, whatever the headers say.
	RateLimits     RateLimits
	TrustedProxies []*net.IPNet
	// LowStockThreshold: at or below this many sellable units the cart and preview warn LOW_STOCK.
	LowStockThreshold int

	// Events is the event broker and the checkout's stream on it (docs/events.md).
	Events Events
	// Webhooks are the sellers' webhooks' delivery settings.
	Webhooks Webhooks

	// ReserveCombining combines concurrent reservations into shared transactions (one commit for
	// many orders: the hot-SKU path); ReserveCombiningInFlight is how many such transactions may
	// be in flight at once (0: the inventory engine's default). ConfirmCombining does the same for
	// confirms, with as many in flight.
	ReserveCombining         bool
	ReserveCombiningInFlight int
	ConfirmCombining         bool

	// Scheduled jobs: whether the worker creates or updates their Temporal Schedules at start-up,
	// a prefix of the schedule ids (several deployments in one namespace; tests), and when each runs.
	SchedulesEnabled bool
	// WorkerLoops runs the worker's loops (the outbox and availability relays, the checks) beside
	// its Temporal worker. The workers of an earlier build kept running while its runs drain do not:
	// they only finish the runs pinned to them.
	WorkerLoops            bool
	ScheduleIDPrefix       string
	SweeperEvery           Every
	ReconcilerEvery        Every
	CartJanitorEvery       Every
	PaymentReconcilerEvery Every

	// WorkerTuning is the Temporal worker's pollers, task slots and sticky cache.
	WorkerTuning WorkerTuning

	LogLevel string

	// Traces are where the process sends its OpenTelemetry traces and which it keeps.
	Traces Traces
}

// DefaultWorkflowPollers is the most workflow-task polls the worker keeps open on each of its two
// queues, the task queue and its own sticky queue (the SDK scales between 1 and it; see
// worker.workflowPollers and docs/benchmarks.md, "Worker tuning").
const DefaultWorkflowPollers = 8

// WorkerTuning is how the worker's Temporal SDK polls and runs tasks: each 0 leaves the SDK's
// default (its figures below).
type WorkerTuning struct {
	// WorkflowPollers is the most polls for workflow tasks on each of the worker's two queues
	// (DefaultWorkflowPollers; 0: the SDK's autoscaling defaults, 5 to start, 1 to 100), and
	// ActivityPollers the goroutines long-polling for activity tasks (0: the SDK's 2).
	WorkflowPollers, ActivityPollers int
	// MaxWorkflowTasks, MaxActivities and MaxLocalActivities bound the workflow tasks, activities
	// and local activities the worker runs at once (the SDK's default: 1,000 each; 1 workflow task
	// is refused, as the SDK refuses it).
	MaxWorkflowTasks, MaxActivities, MaxLocalActivities int
	// StickyCacheSize is how many workflow executions the process keeps in memory between their
	// tasks, shared by its workers (the SDK's default: 10,000); one evicted is replayed from its
	// history at its next task.
	StickyCacheSize int
}

// Traces are the tracing settings: the one place the sampling is decided.
type Traces struct {
	// Endpoint is the OTLP/HTTP traces endpoint (a collector's, or Jaeger's
	// http://127.0.0.1:4318/v1/traces); empty turns tracing off. `dev` points it at the Jaeger it
	// starts.
	Endpoint string
	// SampleRatio is the share of new traces kept (0 to 1); a trace begun by a caller keeps the
	// caller's decision. `dev` keeps every trace unless it is set.
	SampleRatio float64
	// SlowThreshold: a request or step that takes this long or longer keeps its trace whatever
	// the ratio, as does one that fails (0: failures only).
	SlowThreshold time.Duration
}

// DevStack is where `dev` runs the servers it starts itself, and what with.
type DevStack struct {
	DataDir string
	PGPort  int
	// PGUnixSocket makes the stack's processes reach its private cluster over the cluster's Unix
	// socket rather than TCP on loopback (tools on the port still can).
	PGUnixSocket   bool
	TemporalCLI    string
	TemporalPort   int
	TemporalUIPort int
	// TemporalMetricsPort serves the dev server's own Prometheus metrics (0: a port the CLI picks).
	TemporalMetricsPort int
	// TemporalDevConfig are more dynamic config values of the dev server (key=value, comma-separated).
	TemporalDevConfig []string
	// TemporalSQLiteSync is the dev server's SQLite `synchronous` pragma: normal (the default: in
	// WAL mode a commit is not fsynced, the checkpoint is) or full (every commit fsynced, as the
	// cluster's PostgreSQL does).
	TemporalSQLiteSync string
	// PrometheusPort, when above 0, makes dev start the distribution's Prometheus on that loopback
	// port, scraping the stack with the product's rules (`make run PROMETHEUS=1`).
	PrometheusPort int
	// JaegerUIPort serves the Jaeger UI and query API `dev` starts when TRACES_ENDPOINT is not set
	// (0: no Jaeger, no traces); JaegerOTLPPort is its OTLP/HTTP receiver, both on 127.0.0.1.
	// JaegerBin is the pinned Jaeger the Makefile builds.
	JaegerUIPort   int
	JaegerOTLPPort int
	JaegerBin      string
	// NATSServer is the nats-server binary (bin/nats-server, built by the Makefile); NATSPort its
	// client port and NATSMonitorPort its monitoring endpoint (127.0.0.1).
	NATSServer      string
	NATSPort        int
	NATSMonitorPort int
	// BuildsQueryWindow is how long `dev` and `cluster` keep the workers of an earlier build once
	// Temporal reports it drained: its closed runs are still queried (the UI's `status`) by their
	// own build's workers.
	BuildsQueryWindow time.Duration
}

// Events is where the checkout publishes its events and how its stream is kept.
type Events struct {
	// NATSURL lists the NATS servers (JetStream), comma-separated. Empty in `dev` means: start one.
	NATSURL string
	// Prefix names the stream (<PREFIX>_EVENTS) and subjects (<prefix>.events.<type>): several
	// deployments may share a broker.
	Prefix string
	// Replicas of the stream; MaxAge and MaxBytes bound what it keeps.
	Replicas int
	MaxAge   time.Duration
	MaxBytes int64
	// OutboxRetention is how long published events stay in the outbox table.
	OutboxRetention time.Duration
	// KafkaBrokers, when set, makes the workers forward every event to KafkaTopic as well.
	KafkaBrokers []string
	KafkaTopic   string
}

// Webhooks say how sellers' webhooks are delivered.
type Webhooks struct {
	// AllowPrivateTargets lets endpoints be http:// and on this network's own addresses: `dev`
	// only (api and worker refuse it).
	AllowPrivateTargets bool
	// Timeout bounds one delivery's request; RetryFor how long a failing delivery is tried again
	// before its endpoint is disabled; Concurrency how many endpoints one worker sends to at once;
	// SecretOverlap how long a rotated secret keeps signing beside the new one.
	Timeout       time.Duration
	RetryFor      time.Duration
	Concurrency   int
	SecretOverlap time.Duration
	// RetryBase is the first wait after a failed attempt, doubling up to RetryMax (with jitter).
	RetryBase time.Duration
	RetryMax  time.Duration
}

// PaysimFaults are the simulator's fault defaults of one process: latency added to every provider
// call, and the share of calls failing as "provider unavailable".
type PaysimFaults struct {
	Latency     time.Duration
	FailureRate float64
}

// Defaults of a local machine. There are no default secrets: `dev` makes its own (DevSecretsOf),
// and api and worker refuse to start without theirs (CheckSecrets).
const (
	DefaultHTTPAddr = ":8080"
	// DefaultMetricsAddr is on loopback: /metrics names every route, queue and job of the
	// process, for the scraper only. A deployment whose scraper is elsewhere sets METRICS_ADDR
	// (the compose file: ":9091" in each container, published on the host's loopback).
	DefaultMetricsAddr    = "127.0.0.1:9091"
	DefaultHoldTTL        = 15 * time.Minute
	DefaultNamespace      = "default"
	DefaultTaskQueue      = "checkout"
	DefaultPGPort         = 55432
	DefaultTemporalPort   = 7233
	DefaultTemporalUIPort = 8233
	// DefaultNATSPort and DefaultNATSMonitorPort are NATS's conventional client and monitoring
	// ports.
	DefaultNATSPort        = 4222
	DefaultNATSMonitorPort = 8222
	// DefaultMaxOpenOrders is how many orders a shopper may have waiting for payment at once.
	DefaultMaxOpenOrders = 3
	// DefaultOrdersMaxInFlight and DefaultOrdersAdmitMaxLatency are the admission limits of POST
	// /orders per API process: far above a normal day's load, reached when a campaign pushes the
	// order path past what Temporal and PostgreSQL answer promptly.
	DefaultOrdersMaxInFlight     = 100
	DefaultOrdersAdmitMaxLatency = 5 * time.Second
	// DefaultWorkflowTaskTimeout is WORKFLOW_TASK_TIMEOUT's default: a lost task costs an order
	// 5 s rather than the SDK's 10 s, and a task's local activities that run past 80 % of it keep
	// it alive with a heartbeat. 3 s timed out tasks a saturated worker was still working on
	// (docs/benchmarks.md, "Workflow tasks lost at saturation").
	DefaultWorkflowTaskTimeout = 5 * time.Second
	// MaxAdmitLatency is the largest latency limit that can act: an order waits no longer for
	// its answer than this.
	MaxAdmitLatency = 30 * time.Second
	// DefaultTraceSampleRatio is the share of new traces kept outside `dev`; failed and slow ones
	// are kept whatever it says. DefaultTraceSlowThreshold is what counts as slow: a POST /orders
	// answered within it is the common case.
	DefaultTraceSampleRatio   = 0.1
	DefaultTraceSlowThreshold = 2 * time.Second
	// DefaultJaegerUIPort and DefaultJaegerOTLPPort are the local Jaeger's UI (and query API) and
	// OTLP/HTTP ports.
	DefaultJaegerUIPort   = 16686
	DefaultJaegerOTLPPort = 4318
)

// MaxParkedGiveUpAfter bounds PARKED_GIVE_UP_AFTER: a parked order is given up, its authorization
// voided, half a day before the provider lets an authorization expire (about 7 days).
const MaxParkedGiveUpAfter = 6*24*time.Hour + 12*time.Hour

// ProviderPaysim is the payment simulator: authorizations and captures with no money moving.
const ProviderPaysim = "paysim"

// ProviderStripe is Stripe, through its official Go library (payment/stripepay).
const ProviderStripe = "stripe"

// Stripe are the settings of the Stripe adapter.
type Stripe struct {
	// SecretKey is the account's secret API key (STRIPE_SECRET_KEY: sk_test_… in test mode, or a
	// restricted key rk_…).
	SecretKey string
	// APIURL replaces Stripe's API address (STRIPE_API_URL; stripe-mock in tests); empty: Stripe's.
	APIURL string
	// ReturnURL is where Stripe sends the shopper's browser after 3-D Secure (STRIPE_RETURN_URL;
	// default PUBLIC_BASE_URL).
	ReturnURL string
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.Getenv) }

// Load reads the configuration through getenv, so tests can pass their own.
func Load(getenv func(string) string) (Config, error) {
	p := parser{getenv: getenv}
	c := Config{
		DatabaseURL:             p.str("DATABASE_URL", ""),
		DBMaxConns:              int32(p.int("DB_MAX_CONNS", 40)),
		TemporalAddress:         p.str("TEMPORAL_ADDRESS", ""),
		TemporalNamespace:       p.str("TEMPORAL_NAMESPACE", DefaultNamespace),
		TaskQueue:               p.str("TEMPORAL_TASK_QUEUE", DefaultTaskQueue),
		DeploymentName:          p.str("TEMPORAL_DEPLOYMENT_NAME", ""),
		SetCurrent:              p.str("TEMPORAL_SET_CURRENT", "auto"),
		HTTPAddr:                p.str("HTTP_ADDR", DefaultHTTPAddr),
		PublicBaseURL:           p.str("PUBLIC_BASE_URL", ""),
		HoldTTL:                 p.duration("HOLD_TTL", DefaultHoldTTL),
		StepRetryWindow:         p.duration("STEP_RETRY_WINDOW", 2*time.Minute),
		ParkedEscalateAfter:     p.duration("PARKED_ESCALATE_AFTER", 24*time.Hour),
		ParkedGiveUpAfter:       p.duration("PARKED_GIVE_UP_AFTER", 6*24*time.Hour),
		HoldExtendBy:            p.duration("HOLD_EXTEND_BY", 5*time.Minute),
		HoldExtendWindow:        p.duration("HOLD_EXTEND_WINDOW", 5*time.Minute),
		HoldExtendMax:           p.int("HOLD_EXTEND_MAX", 1),
		OrdersMaxOpenPerShopper: p.int("ORDERS_MAX_OPEN_PER_SHOPPER", DefaultMaxOpenOrders),
		OrdersMaxInFlight:       p.int("ORDERS_MAX_IN_FLIGHT", DefaultOrdersMaxInFlight),
		OrdersAdmitMaxLatency:   p.duration("ORDERS_ADMIT_MAX_LATENCY", DefaultOrdersAdmitMaxLatency),
		WorkflowTaskTimeout:     p.duration("WORKFLOW_TASK_TIMEOUT", DefaultWorkflowTaskTimeout),
		FeaturesCacheTTL:        p.duration("FEATURES_CACHE_TTL", time.Second),
		JWTSecret:               p.getenv("AUTH_JWT_SECRET"),
		JWTKeyID:                p.str("AUTH_JWT_KID", ""),
		JWTIssuer:               p.str("AUTH_JWT_ISSUER", ""),
		JWTAudience:             p.str("AUTH_JWT_AUDIENCE", ""),
		JWTMaxLifetime:          p.duration("AUTH_JWT_MAX_LIFETIME", 24*time.Hour),
		OIDCIssuer:              p.str("AUTH_OIDC_ISSUER", ""),
		OIDCAudience:            p.str("AUTH_OIDC_AUDIENCE", ""),
		OIDCJWKSURL:             p.str("AUTH_OIDC_JWKS_URL", ""),
		PaymentWebhookSecret:    p.getenv("PAYMENT_WEBHOOK_SECRET"),
		CodecKey:                codec.Key{ID: p.str("TEMPORAL_CODEC_KID", ""), Secret: p.base64("TEMPORAL_CODEC_KEY")},
		TemporalUIOrigins:       p.list("TEMPORAL_UI_ORIGIN"),
		PaymentProvider:         p.str("PAYMENT_PROVIDER", ""),
		PaymentWebhookURL:       p.str("PAYMENT_WEBHOOK_URL", ""),
		Stripe: Stripe{SecretKey: p.getenv("STRIPE_SECRET_KEY"), APIURL: p.str("STRIPE_API_URL", ""),
			ReturnURL: p.str("STRIPE_RETURN_URL", "")},
		MetricsAddr: p.str("METRICS_ADDR", DefaultMetricsAddr),
		LogLevel:    p.str("LOG_LEVEL", "info"),

		Dev: DevStack{
			DataDir:             p.str("DATA_DIR", ".data"),
			PGPort:              p.int("PG_PORT", DefaultPGPort),
			PGUnixSocket:        p.bool("PG_UNIX_SOCKET", true),
			TemporalCLI:         p.str("TEMPORAL_CLI", "bin/temporal"),
			TemporalPort:        p.int("TEMPORAL_PORT", DefaultTemporalPort),
			TemporalUIPort:      p.int("TEMPORAL_UI_PORT", DefaultTemporalUIPort),
			TemporalMetricsPort: p.int("TEMPORAL_METRICS_PORT", 0),
			TemporalDevConfig:   p.list("TEMPORAL_DEV_DYNAMIC_CONFIG"),
			TemporalSQLiteSync:  p.str("TEMPORAL_DEV_SQLITE_SYNC", "normal"),
			PrometheusPort:      p.int("PROMETHEUS_PORT", 0),
			BuildsQueryWindow:   p.duration("BUILDS_QUERY_WINDOW", 10*time.Minute),
			JaegerUIPort:        p.int("JAEGER_UI_PORT", DefaultJaegerUIPort),
			JaegerOTLPPort:      p.int("JAEGER_OTLP_PORT", DefaultJaegerOTLPPort),
			JaegerBin:           p.str("JAEGER_BIN", "bin/jaeger"),
			NATSServer:          p.str("NATS_SERVER", "bin/nats-server"),
			NATSPort:            p.int("NATS_PORT", DefaultNATSPort),
			NATSMonitorPort:     p.int("NATS_MONITOR_PORT", DefaultNATSMonitorPort),
		},
		PaysimFaults: PaysimFaults{Latency: p.duration("PAYSIM_LATENCY", 0), FailureRate: p.float("PAYSIM_FAILURE_RATE", 0)},

		CartMaxLines:          p.int("CART_MAX_LINES", 50),
		CartMaxUnitsPerLine:   p.int("CART_MAX_UNITS_PER_LINE", 99),
		CartIdleTTL:           p.duration("CART_IDLE_TTL", 90*24*time.Hour),
		CartViewCacheTTL:      p.duration("CART_VIEW_CACHE_TTL", time.Second),
		CartCacheEntries:      p.int("CART_CACHE_ENTRIES", 100_000),
		CartCacheMemoryMB:     p.int("CART_CACHE_MEMORY_MB", 64),
		CartCacheMaxAge:       p.duration("CART_CACHE_MAX_AGE", 5*time.Minute),
		AuthTokenCacheEntries: p.int("AUTH_TOKEN_CACHE_ENTRIES", 50_000),
		LowStockThreshold:     p.int("LOW_STOCK_THRESHOLD", 3),
		Events: Events{NATSURL: p.str("NATS_URL", ""), Prefix: p.str("EVENTS_PREFIX", "checkout"),
			Replicas: p.int("EVENTS_REPLICAS", 1), MaxAge: p.duration("EVENTS_MAX_AGE", 7*24*time.Hour),
			MaxBytes: int64(p.int("EVENTS_MAX_MB", 1024)) << 20, OutboxRetention: p.duration("OUTBOX_RETENTION", 72*time.Hour),
			KafkaBrokers: p.list("KAFKA_BROKERS"), KafkaTopic: p.str("KAFKA_TOPIC", "checkout.events")},
		Webhooks: Webhooks{AllowPrivateTargets: p.bool("WEBHOOKS_ALLOW_PRIVATE_TARGETS", false),
			Timeout: p.duration("WEBHOOK_TIMEOUT", 10*time.Second), RetryFor: p.duration("WEBHOOK_RETRY_FOR", 24*time.Hour),
			Concurrency: p.int("WEBHOOK_CONCURRENCY", 32), SecretOverlap: p.duration("WEBHOOK_SECRET_OVERLAP", 24*time.Hour),
			RetryBase: p.duration("WEBHOOK_RETRY_BASE", 5*time.Second), RetryMax: p.duration("WEBHOOK_RETRY_MAX", time.Hour)},

		CodecEncrypt:             p.bool("TEMPORAL_CODEC_ENCRYPT", true),
		CodecAcceptPlaintext:     p.bool("TEMPORAL_CODEC_ACCEPT_PLAINTEXT", false),
		ReserveCombining:         p.bool("RESERVE_COMBINING", true),
		ReserveCombiningInFlight: p.int("RESERVE_COMBINING_IN_FLIGHT", 0),
		ConfirmCombining:         p.bool("CONFIRM_COMBINING", true),

		SchedulesEnabled: p.bool("SCHEDULES_ENABLED", true),
		WorkerLoops:      p.bool("WORKER_LOOPS", true),
		WorkerTuning: WorkerTuning{WorkflowPollers: p.int("WORKER_WORKFLOW_POLLERS", DefaultWorkflowPollers),
			ActivityPollers: p.int("WORKER_ACTIVITY_POLLERS", 0), MaxWorkflowTasks: p.int("WORKER_MAX_WORKFLOW_TASKS", 0),
			MaxActivities: p.int("WORKER_MAX_ACTIVITIES", 0), MaxLocalActivities: p.int("WORKER_MAX_LOCAL_ACTIVITIES", 0),
			StickyCacheSize: p.int("WORKER_STICKY_CACHE_SIZE", 0)},
		ScheduleIDPrefix:       p.str("SCHEDULE_ID_PREFIX", ""),
		SweeperEvery:           p.every("SWEEPER_EVERY", time.Minute),
		ReconcilerEvery:        p.every("RECONCILER_EVERY", 15*time.Minute),
		CartJanitorEvery:       p.every("CART_JANITOR_EVERY", 24*time.Hour),
		PaymentReconcilerEvery: p.every("PAYMENT_RECONCILER_EVERY", 5*time.Minute),

		Traces: Traces{Endpoint: p.str("TRACES_ENDPOINT", ""), SampleRatio: p.float("TRACES_SAMPLE_RATIO", DefaultTraceSampleRatio),
			SlowThreshold: p.duration("TRACES_SLOW_THRESHOLD", DefaultTraceSlowThreshold)},
	}
	c.RateLimits, c.TrustedProxies = p.rateLimits(), p.trustedProxies()
	c.TemporalTLS = p.temporalTLS()
	if keys, err := parseKeys(p.getenv("AUTH_JWT_KEYS")); err != nil {
		p.errs = append(p.errs, err)
	} else {
		c.JWTKeys = keys
	}
	if v := strings.TrimSpace(p.getenv("AUTH_JWT_ROLES")); v != "" && v != "none" {
		c.JWTRoles = p.list("AUTH_JWT_ROLES")
	}
	if keys, err := parseCodecKeys(p.getenv("TEMPORAL_CODEC_KEYS")); err != nil {
		p.errs = append(p.errs, err)
	} else {
		c.CodecKeys = keys
	}
	if c.DeploymentName == "" {
		c.DeploymentName = c.TaskQueue
	}
	if c.PublicBaseURL == "" {
		c.PublicBaseURL = "http://" + loopback(c.HTTPAddr)
	}
	if c.PaymentWebhookURL == "" {
		c.PaymentWebhookURL = strings.TrimRight(c.PublicBaseURL, "/") + "/api/v1/payments/webhook"
	}
	if c.Stripe.ReturnURL == "" {
		c.Stripe.ReturnURL = c.PublicBaseURL
	}
	if len(p.errs) > 0 {
		return Config{}, errors.Join(p.errs...)
	}
	return c, c.Validate()
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.MetricsAddr == c.HTTPAddr {
		errs = append(errs, fmt.Errorf("METRICS_ADDR %s: must differ from HTTP_ADDR, so that /metrics stays off the public port", c.MetricsAddr))
	}
	if c.HoldTTL < time.Second {
		errs = append(errs, fmt.Errorf("HOLD_TTL %s: must be at least 1s", c.HoldTTL))
	}
	if c.ParkedEscalateAfter < time.Second || c.ParkedGiveUpAfter <= c.ParkedEscalateAfter ||
		c.ParkedGiveUpAfter > MaxParkedGiveUpAfter {
		errs = append(errs, fmt.Errorf("PARKED_ESCALATE_AFTER %s, PARKED_GIVE_UP_AFTER %s: at least 1s, the second after the first "+
			"and at most %s (an authorization expires at the provider after about 7 days)",
			c.ParkedEscalateAfter, c.ParkedGiveUpAfter, MaxParkedGiveUpAfter))
	}
	if c.HoldExtendBy < time.Second || c.HoldExtendWindow < time.Second || c.HoldExtendMax < 0 {
		errs = append(errs, fmt.Errorf("HOLD_EXTEND_BY %s, HOLD_EXTEND_WINDOW %s, HOLD_EXTEND_MAX %d: durations of at least 1s and a count of 0 or more",
			c.HoldExtendBy, c.HoldExtendWindow, c.HoldExtendMax))
	}
	switch c.PaymentProvider {
	case "", ProviderPaysim:
	case ProviderStripe:
		if !strings.HasPrefix(c.Stripe.SecretKey, "sk_") && !strings.HasPrefix(c.Stripe.SecretKey, "rk_") {
			errs = append(errs, errors.New("STRIPE_SECRET_KEY: PAYMENT_PROVIDER=stripe needs the account's secret key (sk_… or a restricted rk_…)"))
		}
	default:
		errs = append(errs, fmt.Errorf("PAYMENT_PROVIDER %q: %s (the simulator) or %s", c.PaymentProvider, ProviderPaysim, ProviderStripe))
	}
	if c.OrdersMaxOpenPerShopper < 0 || c.OrdersMaxOpenPerShopper > 1000 {
		errs = append(errs, fmt.Errorf("ORDERS_MAX_OPEN_PER_SHOPPER %d: between 0 (no cap) and 1000", c.OrdersMaxOpenPerShopper))
	}
	if c.OrdersMaxInFlight < 0 || c.OrdersMaxInFlight > 100_000 {
		errs = append(errs, fmt.Errorf("ORDERS_MAX_IN_FLIGHT %d: between 0 (no bound) and 100000", c.OrdersMaxInFlight))
	}
	if l := c.OrdersAdmitMaxLatency; l != 0 && (l < 10*time.Millisecond || l > MaxAdmitLatency) {
		errs = append(errs, fmt.Errorf("ORDERS_ADMIT_MAX_LATENCY %s: between 10ms and %s, or 0 (not watched)", l, MaxAdmitLatency))
	}
	if c.WorkflowTaskTimeout < time.Second || c.WorkflowTaskTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("WORKFLOW_TASK_TIMEOUT %s: between 1s and 1m", c.WorkflowTaskTimeout))
	}
	if c.FeaturesCacheTTL < 0 || c.FeaturesCacheTTL > time.Minute {
		errs = append(errs, fmt.Errorf("FEATURES_CACHE_TTL %s: between 0 and 1m", c.FeaturesCacheTTL))
	}
	if c.JWTMaxLifetime < time.Minute {
		errs = append(errs, fmt.Errorf("AUTH_JWT_MAX_LIFETIME %s: must be at least 1m", c.JWTMaxLifetime))
	}
	if c.DBMaxConns < 2 {
		errs = append(errs, errors.New("DB_MAX_CONNS: must be at least 2"))
	}
	if c.TaskQueue == "" || c.TemporalNamespace == "" {
		errs = append(errs, errors.New("TEMPORAL_TASK_QUEUE and TEMPORAL_NAMESPACE must not be empty"))
	}
	if strings.Contains(c.DeploymentName, ".") {
		errs = append(errs, fmt.Errorf("TEMPORAL_DEPLOYMENT_NAME %q: must not contain \".\"", c.DeploymentName))
	}
	switch c.SetCurrent {
	case "auto", "always", "never":
	default:
		errs = append(errs, fmt.Errorf("TEMPORAL_SET_CURRENT %q: auto, always or never", c.SetCurrent))
	}
	if c.CartMaxLines < 1 || c.CartMaxLines > 1000 || c.CartMaxUnitsPerLine < 1 || c.CartMaxUnitsPerLine > 1000 {
		errs = append(errs, errors.New("CART_MAX_LINES and CART_MAX_UNITS_PER_LINE: between 1 and 1000"))
	}
	if c.CartIdleTTL < time.Hour {
		errs = append(errs, fmt.Errorf("CART_IDLE_TTL %s: must be at least 1h", c.CartIdleTTL))
	}
	if c.CartViewCacheTTL < 0 || c.CartViewCacheTTL > time.Minute {
		errs = append(errs, fmt.Errorf("CART_VIEW_CACHE_TTL %s: between 0 and 1m", c.CartViewCacheTTL))
	}
	if s := c.Dev.TemporalSQLiteSync; s != "normal" && s != "full" {
		errs = append(errs, fmt.Errorf("TEMPORAL_DEV_SQLITE_SYNC %q: normal or full", s))
	}
	if c.CartCacheEntries < 0 || c.CartCacheEntries > 10_000_000 {
		errs = append(errs, fmt.Errorf("CART_CACHE_ENTRIES %d: between 0 (no cache) and 10000000", c.CartCacheEntries))
	}
	if c.CartCacheMemoryMB < 1 || c.CartCacheMemoryMB > 65536 {
		errs = append(errs, fmt.Errorf("CART_CACHE_MEMORY_MB %d: between 1 and 65536", c.CartCacheMemoryMB))
	}
	if c.CartCacheMaxAge < time.Second || c.CartCacheMaxAge > 24*time.Hour {
		errs = append(errs, fmt.Errorf("CART_CACHE_MAX_AGE %s: between 1s and 24h", c.CartCacheMaxAge))
	}
	if c.AuthTokenCacheEntries < 0 || c.AuthTokenCacheEntries > 10_000_000 {
		errs = append(errs, fmt.Errorf("AUTH_TOKEN_CACHE_ENTRIES %d: between 0 (no cache) and 10000000", c.AuthTokenCacheEntries))
	}
	errs = append(errs, c.WorkerTuning.validate()...)
	if c.ReserveCombiningInFlight < 0 || c.ReserveCombiningInFlight > 64 {
		errs = append(errs, fmt.Errorf("RESERVE_COMBINING_IN_FLIGHT %d: between 0 (the default) and 64", c.ReserveCombiningInFlight))
	}
	if c.LowStockThreshold < 0 {
		errs = append(errs, errors.New("LOW_STOCK_THRESHOLD: must not be negative"))
	}
	if c.OIDCIssuer != "" && (c.OIDCAudience == "" || c.OIDCJWKSURL == "") {
		errs = append(errs, errors.New("AUTH_OIDC_ISSUER is set: also set AUTH_OIDC_AUDIENCE (the tokens' audience) and AUTH_OIDC_JWKS_URL (the provider's keys)"))
	}
	for _, o := range c.TemporalUIOrigins {
		if err := checkOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("TEMPORAL_UI_ORIGIN %q: %w", o, err))
		}
	}
	if c.Traces.Endpoint != "" {
		if u, err := url.Parse(c.Traces.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("TRACES_ENDPOINT %q: an http:// or https:// URL of an OTLP/HTTP traces endpoint, such as http://127.0.0.1:4318/v1/traces", c.Traces.Endpoint))
		}
	}
	if c.Traces.SlowThreshold < 0 {
		errs = append(errs, fmt.Errorf("TRACES_SLOW_THRESHOLD %s: must not be negative", c.Traces.SlowThreshold))
	}
	if c.Events.Prefix == "" || !prefixRe.MatchString(c.Events.Prefix) {
		errs = append(errs, fmt.Errorf("EVENTS_PREFIX %q: letters, digits, '_' and '-', dot-separated", c.Events.Prefix))
	}
	if c.Events.Replicas != 1 && c.Events.Replicas != 3 && c.Events.Replicas != 5 {
		errs = append(errs, fmt.Errorf("EVENTS_REPLICAS %d: 1, 3 or 5", c.Events.Replicas))
	}
	if c.Events.MaxAge < time.Hour || c.Events.MaxBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("EVENTS_MAX_AGE %s and EVENTS_MAX_MB %d: at least 1h and 1", c.Events.MaxAge, c.Events.MaxBytes>>20))
	}
	if w := c.Webhooks; w.Timeout < 100*time.Millisecond || w.Timeout > time.Minute || w.RetryFor < time.Second ||
		w.Concurrency < 1 || w.Concurrency > 1000 || w.SecretOverlap < 0 || w.RetryBase < 10*time.Millisecond || w.RetryMax < w.RetryBase {
		errs = append(errs, fmt.Errorf("WEBHOOK_TIMEOUT %s (100ms–1m), WEBHOOK_RETRY_FOR %s (at least 1s), WEBHOOK_CONCURRENCY %d (1–1000), WEBHOOK_SECRET_OVERLAP %s (0 or more), WEBHOOK_RETRY_BASE %s (at least 10ms) up to WEBHOOK_RETRY_MAX %s",
			w.Timeout, w.RetryFor, w.Concurrency, w.SecretOverlap, w.RetryBase, w.RetryMax))
	}
	if c.Events.OutboxRetention < time.Minute {
		errs = append(errs, fmt.Errorf("OUTBOX_RETENTION %s: at least 1m", c.Events.OutboxRetention))
	}
	for _, e := range []struct {
		key   string
		every Every
	}{{"SWEEPER_EVERY", c.SweeperEvery}, {"RECONCILER_EVERY", c.ReconcilerEvery},
		{"CART_JANITOR_EVERY", c.CartJanitorEvery}, {"PAYMENT_RECONCILER_EVERY", c.PaymentReconcilerEvery}} {
		if e.every.Cron == "" && e.every.Interval < time.Second {
			errs = append(errs, fmt.Errorf("%s %s: must be at least 1s", e.key, e.every))
		}
	}
	return errors.Join(errs...)
}

// validate reports the worker's tuning values the SDK would refuse or that cannot work.
func (t WorkerTuning) validate() []error {
	var errs []error
	for _, v := range []struct {
		name     string
		n, least int
		most     int
	}{
		{"WORKER_WORKFLOW_POLLERS", t.WorkflowPollers, 1, 1000},
		{"WORKER_ACTIVITY_POLLERS", t.ActivityPollers, 1, 1000},
		{"WORKER_MAX_WORKFLOW_TASKS", t.MaxWorkflowTasks, 2, 100_000},
		{"WORKER_MAX_ACTIVITIES", t.MaxActivities, 1, 100_000},
		{"WORKER_MAX_LOCAL_ACTIVITIES", t.MaxLocalActivities, 1, 100_000},
		{"WORKER_STICKY_CACHE_SIZE", t.StickyCacheSize, 1, 10_000_000},
	} {
		if v.n != 0 && (v.n < v.least || v.n > v.most) {
			errs = append(errs, fmt.Errorf("%s %d: 0 (the SDK's default) or between %d and %d", v.name, v.n, v.least, v.most))
		}
	}
	return errs
}

// UIOrigin is the Temporal UI's origin under the host name browsers reach the API by (on port):
// the support session cookie is SameSite=Strict, so only a UI on the API's site sends it.
func UIOrigin(publicBaseURL string, port int) string {
	host := "localhost"
	if u, err := url.Parse(publicBaseURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// MetricsURL is where a client on this machine reads the process's /metrics.
func (c Config) MetricsURL() string { return "http://" + c.MetricsTarget() + "/metrics" }

// MetricsTarget is the host:port a scraper on this machine reads /metrics at.
func (c Config) MetricsTarget() string { return loopback(c.MetricsAddr) }

// loopback turns a listen address such as ":8080" into one a local client can dial.
func loopback(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}

var prefixRe = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) str(key, def string) string {
	if v := strings.TrimSpace(p.getenv(key)); v != "" {
		return v
	}
	return def
}

// base64 reads a key given in base64 (`openssl rand -base64 32`); empty when unset.
func (p *parser) base64(key string) []byte {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return nil
	}
	b, err := decodeKey(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: not base64 (make a key with `openssl rand -base64 32`)", key))
	}
	return b
}

func (p *parser) list(key string) []string {
	var out []string
	for _, v := range strings.Split(p.getenv(key), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func (p *parser) int(key string, def int) int {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not an integer", key, v))
		return def
	}
	return n
}

func (p *parser) float(key string, def float64) float64 {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: a number between 0 and 1", key, v))
		return def
	}
	return f
}

// Every is when a scheduled job runs: every Interval, or at the times of the Cron expression
// ("0 3 * * *"; any form Temporal Schedules accept).
type Every struct {
	Interval time.Duration
	Cron     string
}

func (e Every) String() string {
	if e.Cron != "" {
		return e.Cron
	}
	return e.Interval.String()
}

// every reads an interval ("1m", "24h") or a cron expression ("0 3 * * *", "@daily").
func (p *parser) every(key string, def time.Duration) Every {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return Every{Interval: def}
	}
	if d, err := time.ParseDuration(v); err == nil {
		return Every{Interval: d}
	}
	if strings.HasPrefix(v, "@") || len(strings.Fields(v)) >= 5 {
		return Every{Cron: v}
	}
	p.errs = append(p.errs, fmt.Errorf("%s=%q: neither a duration such as 5m nor a cron expression such as \"0 3 * * *\"", key, v))
	return Every{Interval: def}
}

func (p *parser) bool(key string, def bool) bool {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: true or false", key, v))
		return def
	}
	return b
}

func (p *parser) duration(key string, def time.Duration) time.Duration {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not a duration such as 15m or 5s", key, v))
		return def
	}
	return d
}
