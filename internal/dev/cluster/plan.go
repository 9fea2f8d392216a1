// Package cluster runs the production shape of the checkout on one machine, without containers:
// the Temporal server as four processes (frontend, history, matching, worker) on PostgreSQL, its
// Web UI, API replicas and workers of the product's binary, and HAProxy in front of the API. It
// plans the processes (Plan), supervises them (Supervisor) and writes their configuration, which
// is deploy/'s: the same files docker-compose.yml mounts into its containers.
package cluster

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/marketplace/checkout/deploy"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/natsserver"
)

// Ports are the cluster's listeners, all on 127.0.0.1. API replica i (from 1) listens on
// API+i-1, with its /metrics on APIMetrics+i-1; worker i serves /metrics on WorkerMetrics+i-1.
// Codec is HAProxy's https frontend for the codec endpoint (CodecEndpoint).
type Ports struct {
	LB, Stats, UI, Postgres, OIDC, Codec                                        int
	Frontend, FrontendHTTP, History, Matching, Worker                           int
	FrontendMembership, HistoryMembership, MatchingMembership, WorkerMembership int
	FrontendMetrics, HistoryMetrics, MatchingMetrics, WorkerServiceMetrics      int
	API, APIMetrics, WorkerMetrics                                              int
	// Jaeger serves the traces' UI and query API; JaegerOTLP receives the processes' spans.
	Jaeger, JaegerOTLP, JaegerGRPC int
	// NATS node i (from 1) of the event broker listens for clients on NATS+i-1, for its cluster's
	// routes on NATSRoutes+i-1 and serves its monitoring on NATSMonitor+i-1.
	NATS, NATSRoutes, NATSMonitor int
}

// MaxReplicas bounds the API replicas and the workers, each.
const MaxReplicas = 20

// DefaultPorts are the ports of `make cluster`: the API on 8080 and the Temporal UI on 8233 as in
// `make run`, the staff's sign-in beside the UI on 8234, the codec endpoint over https on 8443, and
// Temporal's own conventional ports.
func DefaultPorts() Ports {
	return Ports{LB: 8080, Stats: 8404, UI: 8233, Postgres: 55432, OIDC: 8234, Codec: 8443,
		Frontend: 7233, FrontendHTTP: 7243, History: 7234, Matching: 7235, Worker: 7239,
		FrontendMembership: 6933, HistoryMembership: 6934, MatchingMembership: 6935, WorkerMembership: 6939,
		FrontendMetrics: 8000, HistoryMetrics: 8001, MatchingMetrics: 8002, WorkerServiceMetrics: 8003,
		API: 8081, APIMetrics: 9101, WorkerMetrics: 9201, Jaeger: 16686, JaegerOTLP: 4318, JaegerGRPC: 16685,
		NATS: 4222, NATSRoutes: 6222, NATSMonitor: 8222}
}

// PortsFrom puts every listener on consecutive ports from first, with room for MaxReplicas of
// each kind: a second cluster beside the first, or a test's.
func PortsFrom(first int) Ports {
	next := func(n int) int { p := first; first += n; return p }
	return Ports{LB: next(1), Stats: next(1), UI: next(1), Postgres: next(1), OIDC: next(1),
		Frontend: next(1), FrontendHTTP: next(1), History: next(1), Matching: next(1), Worker: next(1),
		FrontendMembership: next(1), HistoryMembership: next(1), MatchingMembership: next(1), WorkerMembership: next(1),
		FrontendMetrics: next(1), HistoryMetrics: next(1), MatchingMetrics: next(1), WorkerServiceMetrics: next(1),
		API: next(MaxReplicas), APIMetrics: next(MaxReplicas), WorkerMetrics: next(MaxReplicas),
		Jaeger: next(1), JaegerOTLP: next(1), JaegerGRPC: next(1),
		NATS: next(NATSNodes), NATSRoutes: next(NATSNodes), NATSMonitor: next(NATSNodes), Codec: next(1)}
}

// PortsSpan is how many consecutive ports PortsFrom takes.
const PortsSpan = 22 + 3*MaxReplicas + 3*NATSNodes

// NATSNodes is the event broker's cluster: three JetStream nodes, the stream on all three, one
// of them down at a time taken in stride.
const NATSNodes = 3

// NATSCluster names the broker's cluster.
const NATSCluster = "checkout-events"

// FreeRange finds PortsSpan consecutive free ports for PortsFrom, below the kernel's ephemeral
// range (32768 on), where the free ports other programs ask the kernel for come from.
func FreeRange() (int, error) {
	for range 200 {
		first := 20000 + rand.IntN(32768-20000-PortsSpan)
		free := true
		for p := first; p < first+PortsSpan && free; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return first, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports between 20000 and 32768", PortsSpan)
}

// Options describe a cluster.
type Options struct {
	// Dir is the data folder: PostgreSQL's cluster, secrets, configuration, logs.
	Dir string
	// Checkout, TemporalServer, SQLTool, UIServer, UIConfig, HAProxy, OIDCProvider, Jaeger and
	// NATSServer are the programs (UIConfig: the folder of the UI server's own docker.yaml).
	Checkout, TemporalServer, SQLTool, UIServer, UIConfig, HAProxy, OIDCProvider, Jaeger, NATSServer string
	APIs, Workers                                                                                    int
	// HistoryShards is fixed when the cluster is first set up.
	HistoryShards int
	Ports         Ports
	Namespace     string
	Secrets       config.Secrets
	// CodecKeys are older codec keys (TEMPORAL_CODEC_KEYS), passed on as they are.
	CodecKeys string
	// OIDC are the staff sign-in's secrets (EnsureOIDC).
	OIDC OIDCSecrets
	// PublicBaseURL is how browsers reach the API: through the load balancer.
	PublicBaseURL string
	// BuildID is the build of the workflow code Checkout runs: its workers are worker-<build>-<i>.
	// Legacy says Checkout has no TLS settings: its processes reach Temporal through the legacy
	// proxy.
	BuildID string
	Legacy  bool
	// TemporalLogLevel is the Temporal services' (default warn).
	TemporalLogLevel string
	// DynamicConfig are more dynamic config values of the Temporal server, key=value (a YAML
	// value), over deploy/temporal-dynamicconfig.yaml's.
	DynamicConfig []string
}

// Plan is every process of a cluster, by start-up stage.
type Plan struct {
	// Schema creates Temporal's two databases and brings their schemas up to date (jobs).
	Schema []Process
	// Temporal is the server's four services. The first starts alone: each service writes the
	// cluster's metadata as it starts, and two writing at once fail on its version.
	Temporal []Process
	// UI is the Temporal Web UI.
	UI Process
	// OIDC is the staff's sign-in, the OpenID Connect provider; it starts before Temporal, whose
	// frontend reads its keys as it starts.
	OIDC Process
	// NATS are the event broker's nodes, a JetStream cluster.
	NATS []Process
	// Migrate applies the product's migrations and the payment simulator's (a job).
	Migrate Process
	// Jaeger keeps the processes' traces (in memory) and shows them.
	Jaeger Process
	// Workers and APIs are the product's processes; HAProxy balances over the APIs.
	Workers, APIs []Process
	HAProxy       Process
	// CheckoutEnv is every checkout process's environment (the workers' and APIs' own listeners
	// aside).
	CheckoutEnv []string
	ports       Ports
	pki         PKI
	legacy      map[string][]string // LegacyEnv, by identity
	// LegacyProxy lets processes of builds without TLS settings reach the frontend (legacy.go).
	LegacyProxy Process
}

// WorkerName names worker i (from 1) of a build.
func WorkerName(build string, i int) string { return fmt.Sprintf("worker-%s-%d", build, i) }

// Worker is worker i (from 1) of a build running bin, serving /metrics in the given slot of the
// workers' metrics ports (0 to MaxReplicas-1: workers of every build running at once share them).
// It never makes its build current: the cluster does, once its workers poll. A legacy bin (a
// build without TLS settings) reaches Temporal through the legacy proxy.
func (p Plan) Worker(build string, i int, bin string, slot int, legacy bool) Process {
	metrics := "127.0.0.1:" + strconv.Itoa(p.ports.WorkerMetrics+slot)
	// The current build's workers keep the schedules (the cluster starts a release's first
	// without, then with) and run the loops; a draining build's neither (builds.DrainingEnv).
	env := slices.Concat(p.CheckoutEnv, p.pki.ClientEnv(IdentityWorker),
		[]string{"SCHEDULES_ENABLED=true", "WORKER_LOOPS=true", "METRICS_ADDR=" + metrics})
	if legacy {
		env = append(env, p.legacy[IdentityWorker.Name]...)
	}
	return Process{Name: WorkerName(build, i), Service: "worker", Path: bin, Args: []string{"worker"}, Env: env,
		Listens: []string{metrics}, Metrics: metrics}
}

// API is API replica i (from 1) running bin; a legacy bin reaches Temporal through the legacy
// proxy.
func (p Plan) API(i int, bin string, legacy bool) Process {
	loop := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	addr, metrics := loop(p.ports.API+i-1), loop(p.ports.APIMetrics+i-1)
	env := slices.Concat(p.CheckoutEnv, p.pki.ClientEnv(IdentityAPI), []string{"HTTP_ADDR=" + addr, "METRICS_ADDR=" + metrics})
	if legacy {
		env = append(env, p.legacy[IdentityAPI.Name]...)
	}
	return Process{Name: fmt.Sprintf("api-%d", i), Service: "api", Path: bin, Args: []string{"api"}, Env: env,
		Listens: []string{addr, metrics}, Metrics: metrics, Ready: HTTPOK("http://" + addr + "/readyz")}
}

// ScrapeTargets are the /metrics a Prometheus of the cluster scrapes at fixed addresses, by job:
// the Temporal server's four services.
func (p Plan) ScrapeTargets() map[string][]string {
	loop := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	pt := p.ports
	return map[string][]string{"temporal": {loop(pt.FrontendMetrics), loop(pt.HistoryMetrics), loop(pt.MatchingMetrics),
		loop(pt.WorkerServiceMetrics)}}
}

// ScrapeFiles are the /metrics a Prometheus of the cluster on dir scrapes as the supervisor lists
// them, by job: the API replicas and the workers of every build that runs, those a release starts
// included (TargetsFile).
func ScrapeFiles(dir string) map[string]string {
	return map[string]string{"checkout-api": TargetsFile(dir, "api"), "checkout-worker": TargetsFile(dir, "worker")}
}

// WorkerSlots is how many workers of all builds may run at once (each its /metrics port).
const WorkerSlots = MaxReplicas

// All is every process of the plan in start order.
func (p Plan) All() []Process {
	all := append([]Process{}, p.Schema...)
	all = append(all, p.Jaeger, p.OIDC)
	all = append(all, p.Temporal...)
	all = append(all, p.NATS...)
	all = append(all, p.Migrate, p.LegacyProxy)
	all = append(all, p.Workers...)
	all = append(all, p.APIs...)
	return append(all, p.UI, p.HAProxy)
}

// Files the cluster writes into its data folder.
const (
	temporalConfigDir  = "temporal"    // temporal-server.yaml and the dynamic config
	uiConfigDir        = "temporal-ui" // base.yaml (loopback) and the UI server's docker.yaml
	haproxyConfig      = "haproxy.cfg"
	haproxyUnavailable = "haproxy-unavailable.http"
	jaegerConfig       = "jaeger.yaml"
	// TemporalEnv is the server's --env: it reads <config dir>/<env>.yaml.
	TemporalEnv = "temporal-server"
)

// HAProxySource is the address HAProxy reaches the API replicas from, and the one address their
// TRUSTED_PROXIES names: a client of the load balancer on this machine comes from 127.0.0.1, so it
// is never taken for the balancer and cannot name another address in X-Forwarded-For.
const HAProxySource = "127.0.0.2"

// PostgresUser is the role Temporal and the product connect as.
const PostgresUser = "postgres"

// SchemaSteps are temporal-sql-tool's commands that set up Temporal's databases, in order; the
// schemas are the ones built into the tool (the server module's schema/postgresql/v12). Creating a
// database that exists fails quietly (--quiet), so every start may run them.
func SchemaSteps() [][]string {
	var steps [][]string
	for _, db := range []struct{ name, schema string }{
		{"temporal", "postgresql/v12/temporal"}, {"temporal_visibility", "postgresql/v12/visibility"}} {
		steps = append(steps,
			[]string{"--quiet", "--db", db.name, "create-database"},
			[]string{"--db", db.name, "setup-schema", "-v", "0.0"},
			[]string{"--db", db.name, "update-schema", "--schema-name", db.schema})
	}
	return steps
}

// TemporalServices are the server's services, each a process.
var TemporalServices = []string{"history", "matching", "frontend", "worker"}

// PKI is where the cluster keeps its certificate authority and certificates (EnsurePKI makes them).
func (o Options) PKI() PKI { return PKI{Dir: filepath.Join(o.Dir, TLSDir)} }

// NewPlan plans the processes of o. It starts nothing.
func NewPlan(o Options) Plan {
	pt := o.Ports
	pki := o.PKI()
	loop := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	var plan Plan

	sqlEnv := []string{"SQL_PLUGIN=postgres12", "SQL_HOST=127.0.0.1", "SQL_PORT=" + strconv.Itoa(pt.Postgres),
		"SQL_USER=" + PostgresUser, "SQL_PASSWORD=",
		// PostgreSQL is on loopback: no TLS (the compose file turns it on, for a database that
		// may leave the host).
		"SQL_TLS=false", "SQL_TLS_CA_FILE="}
	for i, args := range SchemaSteps() {
		plan.Schema = append(plan.Schema, Process{Name: fmt.Sprintf("temporal-schema-%d", i+1), Service: "temporal-schema",
			Path: o.SQLTool, Args: args, Env: sqlEnv, Job: true})
	}

	temporalEnv := append(clone(sqlEnv),
		"NUM_HISTORY_SHARDS="+strconv.Itoa(o.HistoryShards),
		"TEMPORAL_BIND_IP=127.0.0.1",
		"TEMPORAL_FRONTEND_PORT="+strconv.Itoa(pt.Frontend),
		"TEMPORAL_FRONTEND_HTTP_PORT="+strconv.Itoa(pt.FrontendHTTP),
		"TEMPORAL_HISTORY_PORT="+strconv.Itoa(pt.History),
		"TEMPORAL_MATCHING_PORT="+strconv.Itoa(pt.Matching),
		"TEMPORAL_WORKER_PORT="+strconv.Itoa(pt.Worker),
		"TEMPORAL_FRONTEND_MEMBERSHIP_PORT="+strconv.Itoa(pt.FrontendMembership),
		"TEMPORAL_HISTORY_MEMBERSHIP_PORT="+strconv.Itoa(pt.HistoryMembership),
		"TEMPORAL_MATCHING_MEMBERSHIP_PORT="+strconv.Itoa(pt.MatchingMembership),
		"TEMPORAL_WORKER_MEMBERSHIP_PORT="+strconv.Itoa(pt.WorkerMembership),
		"TEMPORAL_FRONTEND_ADDRESS="+loop(pt.Frontend),
		"TEMPORAL_TLS_DIR="+pki.Dir,
		// The authorizer's namespace and the staff's identity provider (tools/temporal-server;
		// the JWKS URL goes into global.authorization.jwtKeyProvider).
		"CHECKOUT_NAMESPACE="+o.Namespace,
		"CHECKOUT_OIDC_ISSUER="+o.Issuer(),
		"CHECKOUT_OIDC_AUDIENCE="+OIDCClientID,
		"CHECKOUT_OIDC_JWKS_URL="+o.JWKSURL(),
		"DYNAMIC_CONFIG_FILE_PATH="+filepath.Join(o.Dir, temporalConfigDir, "dynamicconfig.yaml"),
		"TEMPORAL_LOG_LEVEL="+cmp.Or(o.TemporalLogLevel, "warn"))
	servicePorts := map[string][3]int{ // gRPC, membership, metrics
		"frontend": {pt.Frontend, pt.FrontendMembership, pt.FrontendMetrics},
		"history":  {pt.History, pt.HistoryMembership, pt.HistoryMetrics},
		"matching": {pt.Matching, pt.MatchingMembership, pt.MatchingMetrics},
		"worker":   {pt.Worker, pt.WorkerMembership, pt.WorkerServiceMetrics}}
	for _, svc := range TemporalServices {
		ports := servicePorts[svc]
		p := Process{Name: "temporal-" + svc, Service: "temporal-" + svc, Path: o.TemporalServer,
			Args:    []string{"--root", o.Dir, "--config", temporalConfigDir, "--env", TemporalEnv, "start", "--service", svc},
			Env:     append(clone(temporalEnv), "PROMETHEUS_ENDPOINT="+loop(ports[2])),
			Listens: []string{loop(ports[0]), loop(ports[1]), loop(ports[2])},
			Ready:   Listening(loop(ports[0]))}
		switch svc {
		case "frontend":
			p.Listens = append(p.Listens, loop(pt.FrontendHTTP))
			p.Ready = frontendReady(loop(pt.Frontend), pki)
		case "worker":
			// The internal worker serves no gRPC: it is up once it has joined the membership ring.
			p.Listens = []string{loop(ports[1]), loop(ports[2])}
			p.Ready = Listening(loop(ports[1]))
		}
		plan.Temporal = append(plan.Temporal, p)
	}

	public := strings.TrimRight(o.PublicBaseURL, "/")
	ui := []string{"TEMPORAL_ADDRESS=" + loop(pt.Frontend), "TEMPORAL_UI_PORT=" + strconv.Itoa(pt.UI),
		"TEMPORAL_CODEC_ENDPOINT=" + o.CodecEndpoint(), "TEMPORAL_CODEC_INCLUDE_CREDENTIALS=true",
		"TEMPORAL_CODEC_DEFAULT_ERROR_MESSAGE=" + CodecErrorMessage,
		"TEMPORAL_CODEC_DEFAULT_ERROR_LINK=" + public + "/codec/session",
		// Ops start line cancellations from the UI's start form (the authorizer refuses support).
		"TEMPORAL_START_WORKFLOW_DISABLED=false",
		// Staff sign in with the provider; the UI forwards the person's access token to the
		// frontend (the authorizer) and to the codec endpoint (decoding).
		"TEMPORAL_AUTH_ENABLED=true", "TEMPORAL_AUTH_PROVIDER_URL=" + o.Issuer(),
		"TEMPORAL_AUTH_CLIENT_ID=" + OIDCClientID, "TEMPORAL_AUTH_CLIENT_SECRET=" + o.OIDC.ClientSecret,
		"TEMPORAL_AUTH_CALLBACK_URL=" + o.UICallbackURL(), "TEMPORAL_AUTH_SCOPES=openid,profile,email",
		"TEMPORAL_CODEC_PASS_ACCESS_TOKEN=true"}
	plan.UI = Process{Name: "temporal-ui", Service: "temporal-ui", Path: o.UIServer,
		Args: []string{"--root", o.Dir, "--config", uiConfigDir, "--env", "docker", "start"},
		// The UI server reaches the frontend with its own certificate, which grants nothing alone.
		Env:     append(ui, pki.ClientEnv(IdentityUI)...),
		Listens: []string{loop(pt.UI)},
		Ready:   HTTPOK("http://" + loop(pt.UI) + "/")}

	var natsURLs, routes []string
	for i := range NATSNodes {
		natsURLs = append(natsURLs, "nats://"+loop(pt.NATS+i))
		routes = append(routes, loop(pt.NATSRoutes+i))
	}
	for i := range NATSNodes {
		n := natsserver.Options{Name: fmt.Sprintf("nats-%d", i+1), Dir: filepath.Join(o.Dir, "nats", fmt.Sprintf("%d", i+1)),
			Host: "127.0.0.1", Port: pt.NATS + i, MonitorPort: pt.NATSMonitor + i, Cluster: NATSCluster,
			ClusterPort: pt.NATSRoutes + i, Routes: routes}
		plan.NATS = append(plan.NATS, Process{Name: n.Name, Service: n.Name, Path: o.NATSServer, Args: natsserver.Args(n),
			Listens: []string{loop(n.Port), loop(n.MonitorPort), loop(n.ClusterPort)},
			Ready:   HTTPOK("http://" + loop(n.MonitorPort) + "/healthz?js-enabled-only=true")})
	}
	checkoutEnv := []string{
		"DATABASE_URL=" + DatabaseURL(pt.Postgres, "checkout"),
		"TEMPORAL_ADDRESS=" + loop(pt.Frontend),
		"TEMPORAL_NAMESPACE=" + o.Namespace,
		"AUTH_JWT_SECRET=" + o.Secrets.JWT,
		"PAYMENT_WEBHOOK_SECRET=" + o.Secrets.Webhook,
		"TEMPORAL_CODEC_KEY=" + o.Secrets.CodecKey,
		"TEMPORAL_CODEC_KID=" + o.Secrets.CodecKeyID,
		"TEMPORAL_CODEC_KEYS=" + o.CodecKeys,
		"TEMPORAL_UI_ORIGIN=" + config.UIOrigin(o.PublicBaseURL, pt.UI),
		// Staff tokens are the provider's, checked against its JWKS.
		"AUTH_OIDC_ISSUER=" + o.Issuer(),
		"AUTH_OIDC_AUDIENCE=" + OIDCClientID,
		"AUTH_OIDC_JWKS_URL=" + o.JWKSURL(),
		"PAYMENT_PROVIDER=" + config.ProviderPaysim,
		"PUBLIC_BASE_URL=" + public,
		"PAYMENT_WEBHOOK_URL=" + public + "/api/v1/payments/webhook",
		// The API counts a request as coming from the client HAProxy names, never from HAProxy,
		// which alone connects from HAProxySource.
		"TRUSTED_PROXIES=" + HAProxySource,
		// The cluster makes a build current once its workers poll (a release), never a worker.
		"TEMPORAL_SET_CURRENT=never",
		"TRACES_ENDPOINT=http://" + loop(pt.JaegerOTLP) + "/v1/traces",
		"NATS_URL=" + strings.Join(natsURLs, ","),
		"EVENTS_REPLICAS=" + strconv.Itoa(NATSNodes),
	}
	plan.CheckoutEnv, plan.ports, plan.pki = checkoutEnv, pt, pki
	plan.legacy = map[string][]string{}
	for _, id := range legacyIdentities {
		plan.legacy[id.Name] = LegacyEnv(o, id)
	}
	plan.Migrate = Process{Name: "migrate", Service: "migrate", Path: o.Checkout, Args: []string{"migrate"},
		Env: checkoutEnv, Job: true}
	for i := range o.Workers {
		plan.Workers = append(plan.Workers, plan.Worker(o.BuildID, i+1, o.Checkout, i, o.Legacy))
	}
	for i := range o.APIs {
		plan.APIs = append(plan.APIs, plan.API(i+1, o.Checkout, o.Legacy))
	}
	plan.HAProxy = Process{Name: "haproxy", Service: "haproxy", Path: o.HAProxy,
		Args: []string{"-W", "-db", "-f", filepath.Join(o.Dir, haproxyConfig)},
		Env: []string{"HAPROXY_BIND=" + loop(pt.LB), "HAPROXY_STATS_BIND=" + loop(pt.Stats),
			"HAPROXY_CODEC_BIND=" + loop(pt.Codec), "HAPROXY_CODEC_CERT=" + pki.HAProxyBundle(IdentityCodec),
			"HAPROXY_UNAVAILABLE=" + filepath.Join(o.Dir, haproxyUnavailable), "HAPROXY_SOURCE=" + HAProxySource},
		// Ready once a request through it reaches a replica that is ready.
		Listens: []string{loop(pt.LB), loop(pt.Stats), loop(pt.Codec)}, Ready: HTTPOK("http://" + loop(pt.LB) + "/readyz")}
	plan.Jaeger = Process{Name: "jaeger", Service: "jaeger", Path: o.Jaeger,
		Args: []string{"--config", "file:" + filepath.Join(o.Dir, jaegerConfig)},
		Env: []string{"JAEGER_QUERY_ADDR=" + loop(pt.Jaeger), "JAEGER_OTLP_ADDR=" + loop(pt.JaegerOTLP),
			"JAEGER_QUERY_GRPC_ADDR=" + loop(pt.JaegerGRPC), "JAEGER_UI_ASSETS=" + filepath.Join(o.Dir, filepath.Dir(deploy.JaegerUI))},
		Listens: []string{loop(pt.Jaeger), loop(pt.JaegerOTLP), loop(pt.JaegerGRPC)},
		Ready:   HTTPOK("http://" + loop(pt.Jaeger) + "/api/services")}
	plan.LegacyProxy = legacyProxy(o, o.HAProxy)
	plan.OIDC = oidcProcess(o, o.OIDC.ClientSecret)
	return plan
}

// CodecEndpoint is the API's codec endpoint as the Temporal UI calls it from a browser: HAProxy's
// https frontend, with the cluster's certificate for localhost (IdentityCodec), for the UI passes a
// person's access token to an https:// codec endpoint only; without one it decodes nothing, and
// sends what support types unencrypted, which the workers refuse.
func (o Options) CodecEndpoint() string {
	return "https://localhost:" + strconv.Itoa(o.Ports.Codec) + "/codec"
}

// CodecErrorMessage is what the UI shows in place of a payload it may not decode. The UI server's
// configuration template writes it unquoted into YAML, so it holds no ": ".
const CodecErrorMessage = "Encrypted. Support and ops sign in to decode"

// DatabaseURL is a database of the cluster's PostgreSQL.
func DatabaseURL(port int, database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", PostgresUser, port, database)
}

func clone(env []string) []string { return append([]string{}, env...) }
