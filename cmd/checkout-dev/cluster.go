package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// clusterFlags are `checkout-dev cluster`'s settings.
type clusterFlags struct {
	apis, workers, shards, portsFrom  int
	dir, bin, builds, binary, buildID string
	dynamicConfig                     []string
	demo                              bool
}

func (f *clusterFlags) parse(cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.IntVar(&f.apis, "apis", 2, "API replicas behind HAProxy")
	fs.IntVar(&f.workers, "workers", 2, "workers of each build")
	fs.IntVar(&f.shards, "history-shards", 0, fmt.Sprintf("Temporal history shards, fixed when the cluster's data folder is first set up "+
		"(0: the count the folder was set up with; %d for a new folder)", cluster.DefaultHistoryShards))
	fs.IntVar(&f.portsFrom, "ports-from", 0, fmt.Sprintf("put every listener on %d consecutive ports from this one (0: the standard ports, the API on 8080)", cluster.PortsSpan))
	fs.StringVar(&f.dir, "dir", filepath.Join(cfg.Dev.DataDir, "cluster"), "data folder: PostgreSQL, secrets, configuration, logs")
	fs.StringVar(&f.bin, "bin", "", "folder of temporal-server, temporal-sql-tool and temporal-ui-server (default: this binary's folder)")
	fs.StringVar(&f.builds, "builds", "", "folder of the kept binaries, one per build (default: builds/ in the --bin folder)")
	fs.StringVar(&f.binary, "binary", "", "the checkout binary the cluster runs (default: checkout beside this binary); a binary of another build is a release")
	fs.StringVar(&f.buildID, "build-id", "", "the build of --binary (default: what it says; a binary from before `checkout version` needs it)")
	fs.BoolVar(&f.demo, "demo", true, "load the demo data (as make run does)")
	fs.Func("dynamic-config", "a dynamic config value of the Temporal server, key=value (repeatable), over deploy/temporal-dynamicconfig.yaml's",
		func(kv string) error { f.dynamicConfig = append(f.dynamicConfig, kv); return nil })
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case f.apis < 1 || f.apis > cluster.MaxReplicas || f.workers < 1 || f.workers > cluster.MaxReplicas/2:
		return fmt.Errorf("--apis %d, --workers %d: between 1 and %d API replicas, 1 and %d workers", f.apis, f.workers,
			cluster.MaxReplicas, cluster.MaxReplicas/2)
	case f.shards < 0 || f.shards > 16384:
		return fmt.Errorf("--history-shards %d: between 1 and 16384 (0: the folder's count, or %d for a new folder)", f.shards,
			cluster.DefaultHistoryShards)
	case f.portsFrom < 0 || f.portsFrom+cluster.PortsSpan > 65535:
		return fmt.Errorf("--ports-from %d: 1 to %d", f.portsFrom, 65535-cluster.PortsSpan)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if f.bin == "" {
		f.bin = filepath.Dir(exe)
	}
	if f.builds == "" {
		f.builds = filepath.Join(f.bin, "builds")
	}
	if f.binary, err = productBinary(f.binary); err != nil {
		return err
	}
	for _, p := range []*string{&f.builds, &f.binary} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	return nil
}

// runCluster is `make cluster`: the production shape on this machine. PostgreSQL (the product's
// database and Temporal's two), the Temporal server as four processes and its Web UI, the
// product's workers and API replicas as processes of their own, and HAProxy in front of the API;
// every listener on loopback. A second run reuses the data folder. Ctrl-C stops all of it.
func runCluster(ctx context.Context, cfg config.Config, args []string) error {
	var f clusterFlags
	if err := f.parse(cfg, args); err != nil {
		return err
	}
	// One source of secrets: the cluster's own file. Settings of the shell that would make its
	// processes check tokens, webhooks or payloads otherwise than its tools sign them are dropped,
	// so that no child inherits them.
	for _, name := range dropShellSecrets(os.Getenv, os.Unsetenv) {
		fmt.Printf("cluster: ignoring %s from the environment: the cluster's processes and tools use its own secrets (%s)\n",
			name, config.ClusterSecretsFile(f.dir))
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	o, err := clusterOptions(cfg, f)
	if err != nil {
		return err
	}
	// The binary the cluster runs is kept as its build's: a later release, or a restart after a
	// code change, still finds it while that build's runs drain.
	store := builds.Store{Dir: f.builds, Out: os.Stdout}
	info, err := builds.Describe(ctx, f.binary)
	switch {
	case errors.Is(err, builds.ErrNoVersion) && f.buildID != "":
		// A release before `checkout version`, and before TLS to Temporal.
	case err != nil:
		return err
	case f.buildID == "":
		f.buildID = info.BuildID
	}
	if o.Checkout, err = store.Keep(f.buildID, f.binary); err != nil {
		return err
	}
	o.BuildID, o.Legacy = f.buildID, !info.TemporalTLS
	if o.OIDC, err = cluster.EnsureOIDC(ctx, o); err != nil {
		return fmt.Errorf("the staff's sign-in: %w", err)
	}
	plan := cluster.NewPlan(o)
	if err := cluster.CheckFree(append(plan.All(), cluster.Process{Name: "postgres",
		Listens: []string{"127.0.0.1:" + strconv.Itoa(o.Ports.Postgres)}})); err != nil {
		return err
	}
	if err := cluster.CheckShards(o.Dir, o.HistoryShards); err != nil {
		return err
	}
	step := func(format string, a ...any) { fmt.Printf("cluster: "+format+"\n", a...) }
	pki, err := cluster.EnsurePKI(o.Dir)
	if err != nil {
		return fmt.Errorf("the cluster's certificates: %w", err)
	}
	toolsTLS, err := pki.ClientTLS(cluster.IdentityTools)
	if err != nil {
		return fmt.Errorf("the cluster's certificates: %w", err)
	}
	step("certificates in %s (the cluster's own CA; the frontend requires a client certificate)", pki.Dir)
	if err := cluster.WriteConfig(o, plan); err != nil {
		return err
	}

	// Temporal's connections (four services, 30 each) and the product's, with room for tools and
	// for the workers of a build draining beside the current one.
	maxConns := 4*30 + (f.apis+2*f.workers)*(int(cfg.DBMaxConns)+2) + 40
	pgOpts := pgserver.Options{Dir: filepath.Join(o.Dir, "pg"), Port: o.Ports.Postgres,
		Database: "checkout", Settings: map[string]string{"max_connections": strconv.Itoa(maxConns)},
		Log: openLog(filepath.Join(o.Dir, "logs"), "postgres.log")}
	pg, err := pgserver.Start(ctx, pgOpts)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer func() { pg.Stop() }()
	step("postgres on 127.0.0.1:%d (max_connections %d)", pg.Port, maxConns)

	sup := &cluster.Supervisor{Dir: o.Dir, Out: os.Stdout}
	defer sup.Stop()
	if err := sup.Run(ctx, plan.Schema...); err != nil {
		return err
	}
	step("temporal schemas up to date (databases temporal, temporal_visibility)")
	if err := sup.Start(ctx, plan.Jaeger); err != nil {
		return err
	}
	step("traces (Jaeger) at http://localhost:%d", o.Ports.Jaeger)
	if err := sup.Start(ctx, plan.OIDC); err != nil {
		return err
	}
	step("staff sign-in (OpenID Connect provider) at %s", o.Issuer())
	if err := sup.Start(ctx, plan.Temporal[0]); err != nil {
		return err
	}
	if err := sup.Start(ctx, plan.Temporal[1:]...); err != nil {
		return err
	}
	frontend := "127.0.0.1:" + strconv.Itoa(o.Ports.Frontend)
	if err := cluster.EnsureNamespace(ctx, frontend, o.Namespace, toolsTLS); err != nil {
		return err
	}
	step("temporal frontend, history, matching and worker up (%d history shards); namespace %s", o.HistoryShards, o.Namespace)
	if err := sup.Start(ctx, plan.LegacyProxy); err != nil {
		return err
	}
	step("processes of builds without TLS settings reach Temporal through %s and %s", o.LegacySocket(cluster.IdentityWorker),
		o.LegacySocket(cluster.IdentityAPI))
	if err := sup.Start(ctx, plan.NATS...); err != nil {
		return err
	}
	step("event broker up: a JetStream cluster of %d nats-server nodes (nats://127.0.0.1:%d…; monitoring http://127.0.0.1:%d/)",
		len(plan.NATS), o.Ports.NATS, o.Ports.NATSMonitor)
	if err := sup.Run(ctx, plan.Migrate); err != nil {
		return err
	}
	step("migrations applied (build %s)", f.buildID)
	if f.demo {
		if err := loadDemo(ctx, cluster.DatabaseURL(o.Ports.Postgres, "checkout")); err != nil {
			return err
		}
		step("demo data loaded")
	}

	tc, err := client.DialContext(ctx, client.Options{HostPort: frontend, Namespace: o.Namespace,
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{TLS: toolsTLS}})
	if err != nil {
		return fmt.Errorf("temporal at %s: %w", frontend, err)
	}
	defer tc.Close()
	r, err := startBuilds(ctx, cfg, f, plan, sup, tc, store, step)
	if err != nil {
		return err
	}
	if err := sup.Start(ctx, slices.Concat(plan.APIs, []cluster.Process{plan.UI})...); err != nil {
		return err
	}
	step("API replicas (%d) and the Temporal UI up", f.apis)
	if err := sup.Start(ctx, plan.HAProxy); err != nil {
		return err
	}
	if err := writeCheckoutEnv(o, plan); err != nil {
		return err
	}
	if cfg.Dev.PrometheusPort > 0 {
		// The product's rules over the replicas', the workers' and the Temporal server's /metrics:
		// the workers as the supervisor lists them, so that a release's are scraped as they start.
		prom, err := devprometheus.Start(ctx, devprometheus.Options{Dir: filepath.Join(o.Dir, "prometheus"),
			Port: cfg.Dev.PrometheusPort, Targets: plan.ScrapeTargets(), TargetFiles: cluster.ScrapeFiles(o.Dir),
			Rules: []string{devprometheus.RulesFile}, Log: openLog(filepath.Join(o.Dir, "logs"), "prometheus.log")})
		if err != nil {
			return fmt.Errorf("prometheus: %w", err)
		}
		defer prom.Stop()
		step("prometheus with the rules at %s, scraping the replicas, the workers and Temporal's services", prom.URL)
	}
	printClusterBanner(ctx, o, plan, r)

	bg, bgCtx := errgroup.WithContext(ctx)
	bg.Go(func() error { return r.fleet.Run(bgCtx, 15*time.Second) })
	bg.Go(func() error { return r.serveControl(bgCtx, o.Dir) })
	bg.Go(func() error { return keepPostgres(bgCtx, &pg, pgOpts, filepath.Join(o.Dir, "logs", "postgres.log")) })
	err = bg.Wait()
	fmt.Println("\ncluster: stopping")
	sup.Stop()
	pg.Stop()
	fmt.Println("cluster: stopped")
	return err
}

// startBuilds starts the workers: first those of every earlier build Temporal still routes runs
// to (a restart after a code change finds the build that was current, and any still draining),
// then this build's; this build becomes current once they poll. It is a release when the
// deployment's current build was another: the scheduled jobs move to this build as it becomes
// current, and the earlier build drains under the fleet.
func startBuilds(ctx context.Context, cfg config.Config, f clusterFlags, plan cluster.Plan, sup *cluster.Supervisor,
	tc client.Client, store builds.Store, step func(string, ...any)) (*clusterRun, error) {
	r := &clusterRun{plan: plan, sup: sup, tc: tc, store: store, deployment: cfg.DeploymentName, workers: f.workers,
		build: f.buildID, bin: plan.Migrate.Path}
	r.fleet = &builds.Fleet{Store: store, Sup: sup, Temporal: tc, Deployment: r.deployment, Workers: f.workers,
		Worker: r.workerProcess, QueryWindow: cfg.Dev.BuildsQueryWindow, Out: os.Stdout}
	r.fleet.SetCurrent(f.buildID)
	current, err := currentBuild(ctx, tc, r.deployment)
	if err != nil {
		return nil, err
	}
	if err := r.fleet.Reconcile(ctx); err != nil {
		return nil, err
	}
	if running := r.fleet.Running(); len(running) > 0 {
		step("workers of the earlier builds %v run beside this one until each drains (checkout builds)", running)
	}
	// A fresh deployment, or this build already current: its workers keep the schedules at once.
	schedules := current == "" || current == f.buildID
	if r.current, err = r.startBuild(ctx, f.buildID, r.bin, schedules); err != nil {
		return nil, err
	}
	if current != f.buildID {
		if err := r.setCurrent(ctx, f.buildID, nil, 0, step); err != nil {
			return nil, err
		}
		if !schedules {
			if err := r.takeSchedules(ctx, r.current); err != nil {
				return nil, err
			}
		}
	}
	step("workers of build %s (%d) up; %s is current", f.buildID, f.workers, f.buildID)
	return r, nil
}

// keepPostgres waits until ctx ends, starting PostgreSQL again on its folder and port whenever it
// ends on its own (a crash, `pg_ctl stop -m immediate`), as the supervisor does for the other
// processes: after a pause that doubles from 1 s to 30 s while it keeps dying within a minute. The
// server recovers from its WAL; every process of the cluster reconnects by itself, answering 503
// meanwhile. It fails, and the cluster stops, when PostgreSQL cannot be started again.
func keepPostgres(ctx context.Context, pg **pgserver.Server, o pgserver.Options, log string) error {
	pause := time.Second
	for {
		began := time.Now()
		select {
		case <-ctx.Done():
			return nil
		case <-(*pg).Exited():
		}
		if time.Since(began) > time.Minute {
			pause = time.Second
		}
		fmt.Printf("postgres exited (%v); starting it again in %s (log: %s)\n", (*pg).ExitErr(), pause, log)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
		next, err := pgserver.Start(ctx, o)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("postgres stopped and did not start again (%v): every process depends on it, so the cluster stops; see %s", err, log)
		}
		*pg = next
		fmt.Printf("postgres started again on 127.0.0.1:%d\n", next.Port)
	}
}

// clusterOptions resolves the programs, ports, secrets and settings of the cluster.
func clusterOptions(cfg config.Config, f clusterFlags) (cluster.Options, error) {
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return cluster.Options{}, err
	}
	shards, err := cluster.HistoryShards(dir, f.shards)
	if err != nil {
		return cluster.Options{}, err
	}
	o := cluster.Options{Dir: dir, APIs: f.apis, Workers: f.workers, HistoryShards: shards,
		Namespace: cfg.TemporalNamespace, CodecKeys: os.Getenv("TEMPORAL_CODEC_KEYS"), Ports: cluster.DefaultPorts(),
		TemporalLogLevel: os.Getenv("TEMPORAL_LOG_LEVEL"),
		UIConfig:         filepath.Join(f.bin, "temporal-ui-config"), DynamicConfig: f.dynamicConfig}
	if f.portsFrom > 0 {
		o.Ports = cluster.PortsFrom(f.portsFrom)
	}
	o.PublicBaseURL = "http://localhost:" + strconv.Itoa(o.Ports.LB)
	if v := os.Getenv("PUBLIC_BASE_URL"); v != "" {
		o.PublicBaseURL = cfg.PublicBaseURL
	}
	for _, p := range []struct {
		path *string
		name string
	}{{&o.TemporalServer, "temporal-server"}, {&o.SQLTool, "temporal-sql-tool"}, {&o.UIServer, "temporal-ui-server"},
		{&o.OIDCProvider, "oidc-provider"}, {&o.Jaeger, "jaeger"}, {&o.NATSServer, "nats-server"}} {
		*p.path = filepath.Join(f.bin, p.name)
		if _, err := os.Stat(*p.path); err != nil {
			return o, fmt.Errorf("%s is missing: `make cluster` builds it (or `make tools`)", *p.path)
		}
	}
	if o.HAProxy, err = findHAProxy(); err != nil {
		return o, err
	}
	// The cluster's own secrets, made once in its folder: the one source its processes and its
	// tools (checkout.env, make chaos, the benchmarks, make attack) read, whatever the shell says.
	if o.Secrets, err = config.ClusterSecretsOf(dir); err != nil {
		return o, fmt.Errorf("cluster secrets: %w", err)
	}
	return o, nil
}

// stackSecrets are the settings that decide how a stack's tokens, webhooks and payloads are
// signed and checked: a cluster takes them from its secrets file and its plan, never from the shell
// that starts it, so that its processes and the tools that drive it always agree.
var stackSecrets = []string{"AUTH_JWT_SECRET", "AUTH_JWT_KID", "AUTH_JWT_KEYS", "AUTH_JWT_ISSUER", "AUTH_JWT_AUDIENCE",
	"PAYMENT_WEBHOOK_SECRET", "TEMPORAL_CODEC_KEY", "TEMPORAL_CODEC_KID"}

// dropShellSecrets unsets the stackSecrets the environment sets, and names them.
func dropShellSecrets(getenv func(string) string, unset func(string) error) []string {
	var dropped []string
	for _, name := range stackSecrets {
		if getenv(name) != "" {
			_ = unset(name)
			dropped = append(dropped, name)
		}
	}
	return dropped
}

// findHAProxy is the distribution's haproxy (the Makefile installs it).
func findHAProxy() (string, error) {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy", nil
	}
	return "", errors.New("haproxy is missing: `make cluster` installs it with apt-get as root, or install your distribution's haproxy package")
}

func loadDemo(ctx context.Context, url string) error {
	pool, err := db.Connect(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := demo.Load(ctx, pool); err != nil {
		return fmt.Errorf("demo data: %w", err)
	}
	return nil
}

// writeCheckoutEnv writes checkout.env: the settings of the cluster's checkout processes (the
// first worker's, with the tools' certificate in place of the worker's), with which `checkout
// token`, `audit`, `checkout-dev loadgen` and `make attack` reach this cluster:
// `set -a; . .data/cluster/checkout.env; set +a`. Every one of stackSecrets is written, empty when
// the processes have none, so that sourcing the file overrides whatever the shell exports. It
// holds the secrets: readable by its owner only.
func writeCheckoutEnv(o cluster.Options, plan cluster.Plan) error {
	return os.WriteFile(checkoutEnvFile(o), []byte(checkoutEnv(o, plan)), 0o600)
}

func checkoutEnv(o cluster.Options, plan cluster.Plan) string {
	var b strings.Builder
	b.WriteString("# Written by `checkout-dev cluster` at each start: the settings of its checkout processes.\n")
	b.WriteString("# A worker started by hand with them only finishes runs: it never becomes current (the\n")
	b.WriteString("# release makes a build current), leaves the schedules and runs no loops; give it a\n")
	b.WriteString("# METRICS_ADDR of its own. They carry the tools' certificate, not a worker's.\n")
	set := map[string]bool{}
	for _, kv := range slices.Concat(plan.CheckoutEnv, o.PKI().ClientEnv(cluster.IdentityTools), builds.DrainingEnv) {
		b.WriteString(kv + "\n")
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, name := range stackSecrets {
		if !set[name] {
			b.WriteString(name + "=\n")
		}
	}
	return b.String()
}

func checkoutEnvFile(o cluster.Options) string { return filepath.Join(o.Dir, "checkout.env") }

func printClusterBanner(ctx context.Context, o cluster.Options, plan cluster.Plan, r *clusterRun) {
	// The API takes tokens from the provider alone: a shopper's, as the harness gets them.
	var token string
	tokens, err := cluster.ClusterTokens(o.Dir, o.Issuer(), cluster.OIDCClientID)
	if err == nil {
		token, err = tokens.Shopper(ctx, shopperOfBanner)
	}
	if err != nil {
		token = "(" + err.Error() + ")"
	}
	pt := o.Ports
	fmt.Printf(`
checkout cluster is running (Ctrl-C stops everything)

  API (HAProxy)   %s          stats http://127.0.0.1:%d/
  API replicas    %s
  workers         %s
  builds          %s current; draining beside it: %s   (bin/checkout builds; make release)
  Temporal UI     http://localhost:%d
  traces          http://localhost:%d   (Jaeger; TRACES_SAMPLE_RATIO of new orders, every failed or slow one)
  codec (https)   %s   (the UI decodes there; browsers trust %s)
  Temporal        127.0.0.1:%d (frontend, mutual TLS: a client certificate of %s/tls is required;
                  history :%d, matching :%d, worker :%d)   namespace %s
  PostgreSQL      %s
  data and logs   %s (processes.json: what runs where; logs/<process>.log)

  shopper %d export TOKEN=%s
                  (from the provider, for 10 minutes; the API takes no token of the shared secret)
  other tokens    checkout-dev loadgen and make attack get shoppers' (JWT-profile grant, key
                  %s) and sellers' 42, 43 (client_credentials, their
                  ERPs' secrets in %s); set -a; . %s; set +a first
  staff sign-in   %s   (the UI sends you there)
                  %s
                  (passwords kept in %s)

`, o.PublicBaseURL, pt.Stats, listens(plan.APIs), strings.Join(r.current, ", "), r.build,
		cmp.Or(strings.Join(r.fleet.Running(), ", "), "none"), pt.UI, pt.Jaeger, o.CodecEndpoint(), o.PKI().CAFile(), pt.Frontend, o.Dir, pt.History, pt.Matching,
		pt.Worker, o.Namespace, cluster.DatabaseURL(pt.Postgres, "checkout"), o.Dir, shopperOfBanner, token,
		filepath.Join(o.Dir, cluster.OIDCDir, "shopper-key.pem"), filepath.Join(o.Dir, cluster.OIDCDir, "secrets.json"), checkoutEnvFile(o),
		o.Issuer(), staffLines(o), filepath.Join(o.Dir, cluster.OIDCDir, "secrets.json"))
}

// shopperOfBanner is the shopper whose token the banner shows.
const shopperOfBanner = cluster.MinShopperSubject + 7

// listens names each process and its first address.
func listens(ps []cluster.Process) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+" "+strings.Join(p.Listens, " "))
	}
	return strings.Join(out, ", ")
}

// staffLines names the demo people of the staff's sign-in and their passwords.
func staffLines(o cluster.Options) string {
	var lines []string
	for _, p := range cluster.DemoPeople {
		lines = append(lines, fmt.Sprintf("%-6s %-8s password %s", p.Name, p.Role, o.OIDC.Passwords[p.Name]))
	}
	return strings.Join(lines, "\n                  ")
}
