package main

import (
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
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/worker"
)

// clusterFlags are `checkout cluster`'s settings.
type clusterFlags struct {
	apis, workers, shards, portsFrom int
	dir, bin                         string
	demo                             bool
}

func (f *clusterFlags) parse(cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.IntVar(&f.apis, "apis", 2, "API replicas behind HAProxy")
	fs.IntVar(&f.workers, "workers", 2, "workers")
	fs.IntVar(&f.shards, "history-shards", 16, "Temporal history shards (fixed when the cluster's data folder is first set up)")
	fs.IntVar(&f.portsFrom, "ports-from", 0, fmt.Sprintf("put every listener on %d consecutive ports from this one (0: the standard ports, the API on 8080)", cluster.PortsSpan))
	fs.StringVar(&f.dir, "dir", filepath.Join(cfg.Dev.DataDir, "cluster"), "data folder: PostgreSQL, secrets, configuration, logs")
	fs.StringVar(&f.bin, "bin", "", "folder of temporal-server, temporal-sql-tool and temporal-ui-server (default: this binary's folder)")
	fs.BoolVar(&f.demo, "demo", true, "load the demo data (as make run does)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case f.apis < 1 || f.apis > cluster.MaxReplicas || f.workers < 1 || f.workers > cluster.MaxReplicas:
		return fmt.Errorf("--apis %d, --workers %d: between 1 and %d each", f.apis, f.workers, cluster.MaxReplicas)
	case f.shards < 1 || f.shards > 16384:
		return fmt.Errorf("--history-shards %d: between 1 and 16384", f.shards)
	case f.portsFrom < 0 || f.portsFrom+cluster.PortsSpan > 65535:
		return fmt.Errorf("--ports-from %d: 1 to %d", f.portsFrom, 65535-cluster.PortsSpan)
	}
	if f.bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		f.bin = filepath.Dir(exe)
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
	o, err := clusterOptions(cfg, f)
	if err != nil {
		return err
	}
	plan := cluster.NewPlan(o)
	if err := cluster.CheckFree(append(plan.All(), cluster.Process{Name: "postgres",
		Listens: []string{"127.0.0.1:" + strconv.Itoa(o.Ports.Postgres)}})); err != nil {
		return err
	}
	if err := cluster.CheckShards(o.Dir, o.HistoryShards); err != nil {
		return err
	}
	if err := cluster.WriteConfig(o, plan); err != nil {
		return err
	}
	step := func(format string, a ...any) { fmt.Printf("cluster: "+format+"\n", a...) }

	// Temporal's connections (four services, 30 each) and the product's, with room for tools.
	maxConns := 4*30 + (f.apis+f.workers)*(int(cfg.DBMaxConns)+2) + 40
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
	if err := sup.Start(ctx, plan.Temporal[0]); err != nil {
		return err
	}
	if err := sup.Start(ctx, plan.Temporal[1:]...); err != nil {
		return err
	}
	frontend := "127.0.0.1:" + strconv.Itoa(o.Ports.Frontend)
	if err := cluster.EnsureNamespace(ctx, frontend, o.Namespace); err != nil {
		return err
	}
	step("temporal frontend, history, matching and worker up (%d history shards); namespace %s", o.HistoryShards, o.Namespace)
	if err := sup.Run(ctx, plan.Migrate); err != nil {
		return err
	}
	step("migrations applied")
	if f.demo {
		if err := loadDemo(ctx, cluster.DatabaseURL(o.Ports.Postgres, "checkout")); err != nil {
			return err
		}
		step("demo data loaded")
	}

	// The first worker alone: it registers the search attributes and the schedules and makes its
	// version current before the others start and any order comes in.
	tc, err := client.DialContext(ctx, client.Options{HostPort: frontend, Namespace: o.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return fmt.Errorf("temporal at %s: %w", frontend, err)
	}
	defer tc.Close()
	plan.Workers[0].Ready = workerVersionReady(tc, worker.Version(cfg, ""), o.SetCurrent)
	if err := sup.Start(ctx, plan.Workers[0]); err != nil {
		return err
	}
	if err := sup.Start(ctx, slices.Concat(plan.Workers[1:], plan.APIs, []cluster.Process{plan.UI})...); err != nil {
		return err
	}
	step("workers (%d), API replicas (%d) and the Temporal UI up", f.workers, f.apis)
	if err := sup.Start(ctx, plan.HAProxy); err != nil {
		return err
	}
	if err := writeCheckoutEnv(o, plan); err != nil {
		return err
	}
	printClusterBanner(cfg, o, plan)

	err = keepPostgres(ctx, &pg, pgOpts, filepath.Join(o.Dir, "logs", "postgres.log"))
	fmt.Println("\ncluster: stopping")
	sup.Stop()
	pg.Stop()
	fmt.Println("cluster: stopped")
	return err
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
	o := cluster.Options{Dir: dir, APIs: f.apis, Workers: f.workers, HistoryShards: f.shards,
		Namespace: cfg.TemporalNamespace, CodecKeys: os.Getenv("TEMPORAL_CODEC_KEYS"), Ports: cluster.DefaultPorts(),
		TemporalLogLevel: os.Getenv("TEMPORAL_LOG_LEVEL"),
		UIConfig:         filepath.Join(f.bin, "temporal-ui-config"),
		// Every worker runs this build, started from this tree: its version takes the new orders,
		// as in make run (a deployment that rolls builds out keeps the default, auto).
		SetCurrent: worker.SetCurrentAlways}
	if f.portsFrom > 0 {
		o.Ports = cluster.PortsFrom(f.portsFrom)
	}
	if v := os.Getenv("TEMPORAL_SET_CURRENT"); v != "" {
		o.SetCurrent = cfg.SetCurrent
	}
	o.PublicBaseURL = "http://localhost:" + strconv.Itoa(o.Ports.LB)
	if v := os.Getenv("PUBLIC_BASE_URL"); v != "" {
		o.PublicBaseURL = cfg.PublicBaseURL
	}
	if o.Checkout, err = os.Executable(); err != nil {
		return o, err
	}
	for _, p := range []struct {
		path *string
		name string
	}{{&o.TemporalServer, "temporal-server"}, {&o.SQLTool, "temporal-sql-tool"}, {&o.UIServer, "temporal-ui-server"}} {
		*p.path = filepath.Join(f.bin, p.name)
		if _, err := os.Stat(*p.path); err != nil {
			return o, fmt.Errorf("%s is missing: `make cluster` builds it (or `make bin/%s`)", *p.path, p.name)
		}
	}
	if o.HAProxy, err = findHAProxy(); err != nil {
		return o, err
	}
	// The cluster's own secrets, made once in its folder; a secret set in the environment wins.
	s, err := config.ClusterSecretsOf(dir)
	if err != nil {
		return o, fmt.Errorf("cluster secrets: %w", err)
	}
	for _, e := range []struct {
		key string
		to  *string
	}{{"AUTH_JWT_SECRET", &s.JWT}, {"PAYMENT_WEBHOOK_SECRET", &s.Webhook},
		{"TEMPORAL_CODEC_KEY", &s.CodecKey}, {"TEMPORAL_CODEC_KID", &s.CodecKeyID}} {
		if v := strings.TrimSpace(os.Getenv(e.key)); v != "" {
			*e.to = v
		}
	}
	o.Secrets = s
	return o, nil
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

// workerVersionReady is ready once a worker of this build polls (so it has registered the search
// attributes and the schedules) and, when workers make their version current, it is current.
func workerVersionReady(c client.Client, v sdkworker.WorkerDeploymentVersion, setCurrent string) func(context.Context) error {
	return func(ctx context.Context) error {
		d, err := c.WorkerDeploymentClient().GetHandle(v.DeploymentName).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err != nil {
			return err
		}
		if setCurrent == worker.SetCurrentAlways {
			if cur := d.Info.RoutingConfig.CurrentVersion; cur == nil || cur.BuildID != v.BuildID {
				return fmt.Errorf("build %s is not current yet", v.BuildID)
			}
			return nil
		}
		for _, s := range d.Info.VersionSummaries {
			if s.Version.BuildID == v.BuildID {
				return nil
			}
		}
		return fmt.Errorf("no worker of build %s polls yet", v.BuildID)
	}
}

// writeCheckoutEnv writes checkout.env: the settings of the cluster's checkout processes (the
// first worker's), with which `checkout token`, `loadgen` and `audit` reach this cluster, and a
// worker started by hand joins it (with a METRICS_ADDR of its own):
// `set -a; . .data/cluster/checkout.env; set +a`. It holds the secrets: readable by its owner only.
func writeCheckoutEnv(o cluster.Options, plan cluster.Plan) error {
	var b strings.Builder
	b.WriteString("# Written by `checkout cluster` at each start: the settings of its checkout processes.\n")
	for _, kv := range plan.Workers[0].Env {
		b.WriteString(kv + "\n")
	}
	return os.WriteFile(checkoutEnvFile(o), []byte(b.String()), 0o600)
}

func checkoutEnvFile(o cluster.Options) string { return filepath.Join(o.Dir, "checkout.env") }

func printClusterBanner(cfg config.Config, o cluster.Options, plan cluster.Plan) {
	cfg.JWTSecret = o.Secrets.JWT
	token, err := cfg.AuthKeys().Mint(auth.Principal{UserID: 7, Role: auth.RoleShopper}, cfg.JWTMaxLifetime)
	if err != nil {
		token = "(" + err.Error() + ")"
	}
	pt := o.Ports
	fmt.Printf(`
checkout cluster is running (Ctrl-C stops everything)

  API (HAProxy)   %s          stats http://127.0.0.1:%d/
  API replicas    %s
  workers         %s
  Temporal UI     http://localhost:%d
  Temporal        127.0.0.1:%d (frontend; history :%d, matching :%d, worker :%d)   namespace %s
  PostgreSQL      %s
  data and logs   %s (processes.json: what runs where; logs/<process>.log)

  shopper 7       export TOKEN=%s
  other tokens    set -a; . %s; set +a; bin/checkout token --user 8 --role shopper

`, o.PublicBaseURL, pt.Stats, listens(plan.APIs), listens(plan.Workers), pt.UI, pt.Frontend, pt.History, pt.Matching,
		pt.Worker, o.Namespace, cluster.DatabaseURL(pt.Postgres, "checkout"), o.Dir, token, checkoutEnvFile(o))
}

// listens names each process and its first address.
func listens(ps []cluster.Process) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+" "+strings.Join(p.Listens, " "))
	}
	return strings.Join(out, ", ")
}
