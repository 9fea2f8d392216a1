// Package testenv gives tests real servers: a private PostgreSQL cluster, the pinned Temporal dev
// server and the pinned nats-server with JetStream, each started once per test binary on free
// ports, and a fresh migrated database (and a stream prefix of its own) per test so that tests can
// run in parallel.
//
// TEST_PG_URL points the tests at an existing server instead (any database on it; the tests
// create their own databases next to it).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/childproc"
	"github.com/marketplace/checkout/internal/dev/devtemporal"
	"github.com/marketplace/checkout/internal/dev/natsserver"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/migrations"
	"github.com/marketplace/checkout/payment/paysim"
	"github.com/marketplace/checkout/worker"
)

var (
	pgOnce     sync.Once
	pgServer   *pgserver.Server
	pgDir      string
	pgAdminURL string
	pgTemplate string
	pgErr      error
	dbCounter  atomic.Int64

	tOnce   sync.Once
	tServer *devtemporal.Server
	tErr    error

	smOnce sync.Once
	smProc *childproc.Process
	smURL  string
	smErr  error

	nOnce   sync.Once
	nServer *natsserver.Server
	nDir    string
	nErr    error
)

// Main runs the tests of a package and stops the servers they started.
func Main(m *testing.M) {
	code := m.Run()
	smProc.Stop()
	if tServer != nil {
		tServer.Stop()
	}
	if nServer != nil {
		nServer.Stop()
		os.RemoveAll(nDir)
	}
	if pgServer != nil {
		pgServer.Stop()
		os.RemoveAll(pgDir)
	}
	os.Exit(code)
}

func startPG() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv("TEST_PG_URL"); u != "" {
		pgAdminURL = u
	} else {
		pgDir, pgErr = os.MkdirTemp("", "checkout-test-pg-")
		if pgErr != nil {
			return
		}
		pgServer, pgErr = pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(pgDir, "data"), Fast: true})
		if pgErr != nil {
			return
		}
		pgAdminURL = pgServer.URL("postgres")
	}
	if pgTemplate = os.Getenv(sharedTemplate); pgTemplate != "" {
		return
	}
	pgTemplate = fmt.Sprintf("tmpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if pgErr = adminExec(ctx, "CREATE DATABASE "+pgTemplate); pgErr != nil {
		return
	}
	if _, pgErr = migrations.Up(ctx, withDatabase(pgAdminURL, pgTemplate)); pgErr != nil {
		return
	}
	// The payment simulator's own schema, which the tests' stacks run.
	if _, pgErr = paysim.Migrate(ctx, withDatabase(pgAdminURL, pgTemplate)); pgErr != nil {
		return
	}
	// The processes this one starts (the workers of a fuzz run) use this server and template.
	pgErr = errors.Join(os.Setenv("TEST_PG_URL", pgAdminURL), os.Setenv(sharedTemplate, pgTemplate))
}

// SkipIfShort skips a test that needs a server process of its own under `go test -short` (the
// fast tier, `make test-unit`, which starts no process); `make test` runs it.
func SkipIfShort(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: not in the fast tier (-short)", needs)
	}
}

// sharedTemplate names the migrated template database of the test binary that started this one.
const sharedTemplate = "TESTENV_PG_TEMPLATE"

// DatabaseURL creates a fresh database with every migration applied (the product's and the
// payment simulator's) and returns its URL. The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// EmptyDatabaseURL creates a fresh database with no migration applied, for the tests of the
// migrations themselves, and returns its URL. The database is dropped when the test ends.
func EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

func newDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	SkipIfShort(t, "a PostgreSQL server")
	pgOnce.Do(startPG)
	if pgErr != nil {
		t.Fatalf("test PostgreSQL: %v", pgErr)
	}
	name := fmt.Sprintf("%s_p%d_t%d", pgTemplate, os.Getpid(), dbCounter.Add(1))
	stmt := "CREATE DATABASE " + name
	if migrated {
		stmt += " TEMPLATE " + pgTemplate
	}
	ctx := context.Background()
	if err := adminExec(ctx, stmt); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		_ = adminExec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDatabase(pgAdminURL, name)
}

// Pool returns a pool on a fresh migrated database, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolOn(t, DatabaseURL(t), 60)
}

// PoolOn opens a pool of up to maxConns connections on url, closed when the test ends.
func PoolOn(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Connect(context.Background(), url, maxConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DownDatabaseURL is the URL of a PostgreSQL that is out of reach: something listens there and
// hangs up on every connection, for as long as the test runs, so that no other process can take
// the port in the meantime (as it could a port just closed).
func DownDatabaseURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	return "postgres://checkout@" + ln.Addr().String() + "/checkout?connect_timeout=2"
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, pgAdminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + strings.TrimPrefix(name, "/")
	return u.String()
}

// TemporalAddress returns the address of the test binary's Temporal dev server, started on first
// use with the search attributes the product registers.
func TemporalAddress(t testing.TB) string {
	t.Helper()
	SkipIfShort(t, "the Temporal dev server")
	tOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tServer, tErr = devtemporal.Start(ctx, devtemporal.Options{CLI: os.Getenv("TEMPORAL_CLI"),
			SearchAttributes: worker.SearchAttributeTypes()})
	})
	if tErr != nil {
		t.Fatalf("test Temporal dev server: %v", tErr)
	}
	return tServer.Address
}

// StripeMock returns the base URL of the test binary's stripe-mock, Stripe's own mock of its API
// (bin/stripe-mock, built by the Makefile from the version tools/stripe-mock pins; STRIPE_MOCK
// names another), started on first use on free loopback ports. It checks each request against
// Stripe's API description and answers from its fixtures; it keeps no state.
func StripeMock(t testing.TB) string {
	t.Helper()
	SkipIfShort(t, "stripe-mock")
	smOnce.Do(func() {
		bin, err := findBin(os.Getenv("STRIPE_MOCK"), "bin/stripe-mock")
		if err != nil {
			smErr = fmt.Errorf("%w: run `make stripe-mock`", err)
			return
		}
		httpPort, err1 := pgserver.FreePort()
		httpsPort, err2 := pgserver.FreePort()
		if smErr = errors.Join(err1, err2); smErr != nil {
			return
		}
		addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
		cmd := exec.Command(bin, "-http-addr", addr, "-https-addr", fmt.Sprintf("127.0.0.1:%d", httpsPort))
		if smProc, smErr = childproc.Start("stripe-mock", cmd, nil); smErr != nil {
			return
		}
		smURL = "http://" + addr
		smErr = smProc.WaitReady(context.Background(), time.Minute, func(ctx context.Context) error {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
			}
			return err
		})
	})
	if smErr != nil {
		t.Fatalf("stripe-mock: %v", smErr)
	}
	return smURL
}

// findBin resolves a tool: the given path, else def found in the project's bin/ walking up from
// the working directory (tests run in package folders).
func findBin(path, def string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", err
		}
		return path, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, def)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("%s not found", def)
		}
	}
}

// NATSURL returns the URL of the test binary's nats-server (JetStream on, its store in a
// temporary folder), started on first use. Tests share it: each names its own stream and subjects
// with EventsPrefix.
func NATSURL(t testing.TB) string {
	t.Helper()
	SkipIfShort(t, "nats-server")
	nOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if nDir, nErr = os.MkdirTemp("", "checkout-test-nats-"); nErr != nil {
			return
		}
		nServer, nErr = natsserver.Start(ctx, natsserver.Options{Binary: os.Getenv("NATS_SERVER"), Dir: nDir})
	})
	if nErr != nil {
		t.Fatalf("test nats-server: %v", nErr)
	}
	return nServer.URL
}

var prefixCounter atomic.Int64

// EventsPrefix is a stream prefix (EVENTS_PREFIX) no other test of any test binary uses.
func EventsPrefix(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("t%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, prefixCounter.Add(1))
}

// Secret is a secret for a test's configuration, long enough for CheckSecrets.
const Secret = "test-secret-0123456789abcdef0123456789abcdef"

// CodecKey and CodecKeyID are the tests' key of the payload codec (base64 of 32 bytes).
const (
	CodecKey   = "dGVzdC1jb2RlYy1rZXktb2YtdGhpcnR5LXR3by1ieXQ="
	CodecKeyID = "test-1"
)

// TestEventsMaxMB bounds each test's stream (EVENTS_MAX_MB). The test binary's one nats-server
// reserves every stream's bound out of its JetStream store, which it sizes from the free disk:
// at the product's 1 GiB a stream, a full e2e run ran out of it on a disk with 56 GB free, and
// streams were refused with "insufficient storage resources".
const TestEventsMaxMB = "64"

// Config loads the configuration from env, with test secrets, the test codec key, the payment
// simulator, the test nats-server and a stream prefix of the test's own where env sets none.
// Under -short it starts no nats-server and leaves NATS_URL empty: a fast test that configures
// the API needs no broker, and one that does skips when it asks NATSURL for it.
func Config(t testing.TB, env map[string]string) config.Config {
	t.Helper()
	prefix := EventsPrefix(t)
	cfg, err := config.Load(func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		switch k {
		case "AUTH_JWT_SECRET", "PAYMENT_WEBHOOK_SECRET":
			return Secret
		case "PAYMENT_PROVIDER":
			return config.ProviderPaysim
		case "TEMPORAL_CODEC_KEY":
			return CodecKey
		case "TEMPORAL_CODEC_KID":
			return CodecKeyID
		case "NATS_URL":
			if testing.Short() {
				return ""
			}
			return NATSURL(t)
		case "EVENTS_PREFIX":
			return prefix
		case "EVENTS_MAX_MB":
			return TestEventsMaxMB
		}
		return ""
	})
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	return cfg
}
