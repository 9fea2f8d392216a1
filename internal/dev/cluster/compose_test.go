package cluster_test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/deploy"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/natsserver"
)

type composeService struct {
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

func readCompose(t *testing.T) map[string]composeService {
	t.Helper()
	raw, err := os.ReadFile("../../../deploy/docker-compose.yml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	return doc.Services
}

// TestCompose_TheClustersServicesWithTheSameSettings: deploy/docker-compose.yml, which cannot run
// here, describes what `make cluster` runs: the same services, each given the same settings by
// name; the Temporal services run deploy/temporal-server.yaml with the cluster's arguments; the
// schema job runs the cluster's temporal-sql-tool steps; HAProxy runs deploy/haproxy.cfg.
func TestCompose_TheClustersServicesWithTheSameSettings(t *testing.T) {
	t.Parallel()
	services := readCompose(t)
	plan := cluster.NewPlan(options(t.TempDir(), 2, 2))

	settings := map[string][]string{} // service → the names of its settings
	for _, p := range plan.All() {
		if p.Service == cluster.LegacyProxyName {
			// The cluster's loopback way in for workers of builds from before mutual TLS; a
			// deployment runs such workers with a sidecar of its own.
			continue
		}
		keys := envKeys(p.Env)
		if seen, ok := settings[p.Service]; ok {
			assert.Equal(t, seen, keys, "every process of %s has the same settings", p.Service)
		}
		settings[p.Service] = keys
	}
	// PostgreSQL: internal/dev/pgserver. Prometheus and Grafana: compose only; on this machine
	// `make run PROMETHEUS=1` runs Prometheus with the same rules. certs: what the cluster does
	// in its own process (EnsurePKI), as `checkout certs`.
	want := append(slices.Collect(maps.Keys(settings)), "postgres", "prometheus", "grafana", "certs")
	assert.ElementsMatch(t, want, slices.Collect(maps.Keys(services)), "the same services")
	// Settings a deployment gives and the cluster has no use for: Stripe's, for a shop that sets
	// PAYMENT_PROVIDER=stripe (the cluster runs the simulator; empty means unset).
	composeOnly := []string{"STRIPE_RETURN_URL", "STRIPE_SECRET_KEY"}
	for svc, keys := range settings {
		got := slices.Sorted(maps.Keys(services[svc].Environment))
		if slices.Contains(keys, "PAYMENT_PROVIDER") {
			got = slices.DeleteFunc(got, func(k string) bool { return slices.Contains(composeOnly, k) })
		}
		assert.Equal(t, keys, got, "%s: the same settings by name", svc)
	}

	script := strings.Join(services["temporal-schema"].Entrypoint, "\n")
	for _, step := range cluster.SchemaSteps() {
		assert.Contains(t, script, "temporal-sql-tool "+strings.Join(step, " "))
	}

	for _, p := range plan.Temporal {
		s := services[p.Service]
		run := strings.Join(s.Entrypoint, " ")
		at := slices.Index(p.Args, "--env")
		require.GreaterOrEqual(t, at, 0)
		assert.Contains(t, run, "temporal-server --root /etc/temporal --config config/checkout "+strings.Join(p.Args[at:], " "), p.Service)
		assert.Contains(t, s.Volumes, "./temporal-server.yaml:"+path.Join("/etc/temporal/config/checkout", cluster.TemporalEnv+".yaml")+":ro")
		assert.Contains(t, s.Volumes, "./temporal-dynamicconfig.yaml:"+s.Environment["DYNAMIC_CONFIG_FILE_PATH"]+":ro")
	}
	assert.Contains(t, services["haproxy"].Volumes, "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro")
	assert.Contains(t, services["haproxy"].Volumes, "./"+deploy.HAProxyUnavailable+":"+services["haproxy"].Environment["HAPROXY_UNAVAILABLE"]+":ro")
	assert.Equal(t, []string{"certs", "--dir", "/tls"}, services["certs"].Command)
	assert.Equal(t, []string{"migrate"}, services["migrate"].Command)
	assert.Equal(t, []string{"api"}, services["api"].Command)
	assert.Equal(t, []string{"worker"}, services["worker"].Command)
	assert.Contains(t, services["jaeger"].Volumes, "./"+deploy.Jaeger+":/etc/jaeger/jaeger.yaml:ro")
	assert.Equal(t, []string{"--config", "file:/etc/jaeger/jaeger.yaml"}, services["jaeger"].Command)

	// The broker's nodes: the same flags, the hosts the containers' (the store in /data, every
	// interface, the other nodes by name).
	for _, n := range plan.NATS {
		got := services[n.Service].Command
		require.Len(t, got, len(n.Args), n.Service)
		for i, arg := range n.Args {
			switch {
			case strings.HasPrefix(arg, "--"):
				assert.Equal(t, arg, got[i], "%s: the same flags in the same order", n.Service)
			case n.Args[i-1] == "--store_dir":
				assert.Equal(t, "/data", got[i])
			case n.Args[i-1] == "--port", n.Args[i-1] == "--http_port", n.Args[i-1] == "--addr":
			case n.Args[i-1] == "--cluster":
				assert.Equal(t, "nats://0.0.0.0:6222", got[i])
			case n.Args[i-1] == "--routes":
				assert.Equal(t, "nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222", got[i])
			default:
				assert.Equal(t, arg, got[i], "%s: %s", n.Service, n.Args[i-1])
			}
		}
	}
}

// TestCompose_ImagesAsTheMakefileBuilds_PortsOnLoopback: the server and UI images are the versions
// make cluster builds, the schema job is temporal-sql-tool's image (never auto-setup), and only
// HAProxy's port is published beyond this host's loopback.
func TestCompose_ImagesAsTheMakefileBuilds_PortsOnLoopback(t *testing.T) {
	t.Parallel()
	services := readCompose(t)
	makefile, err := os.ReadFile("../../../Makefile")
	require.NoError(t, err)
	version := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `\s*:= v(\S+)$`).FindStringSubmatch(string(makefile))
		require.NotNil(t, m, name)
		return m[1]
	}
	server, ui := version("TEMPORAL_SERVER_VERSION"), version("TEMPORAL_UI_VERSION")
	for _, svc := range cluster.TemporalServices {
		assert.Equal(t, "temporalio/server:"+server, services["temporal-"+svc].Image)
	}
	assert.Equal(t, "temporalio/ui:"+ui, services["temporal-ui"].Image)
	jaegerMod, err := os.ReadFile("../../../tools/jaeger/go.mod")
	require.NoError(t, err)
	assert.Contains(t, string(jaegerMod), "github.com/jaegertracing/jaeger v"+version("JAEGER_VERSION"), "bin/jaeger is the Makefile's version")
	assert.Equal(t, "jaegertracing/jaeger:"+version("JAEGER_IMAGE_VERSION"), services["jaeger"].Image,
		"the image of the Go module's release")
	nats := version("NATS_SERVER_VERSION")
	assert.Equal(t, "v"+nats, natsserver.Version, "the nats-server the tests and make run start")
	for i := range cluster.NATSNodes {
		assert.Equal(t, "nats:"+nats, services[fmt.Sprintf("nats-%d", i+1)].Image)
	}
	minor := server[:strings.LastIndex(server, ".")]
	assert.Equal(t, "temporalio/admin-tools:"+minor, services["temporal-schema"].Image, "admin-tools is tagged by minor version")
	for name, s := range services {
		assert.NotContains(t, s.Image, "auto-setup", name)
		for _, p := range s.Ports {
			if name == "haproxy" && p == "8080:8080" {
				continue
			}
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond loopback", name, p)
		}
	}
}

// TestCompose_OnlyHAProxyIsTrusted_ByItsFixedAddress: the API replicas trust HAProxy's exact
// address, which the compose network fixes for HAProxy and HAProxy connects from, as make cluster
// does on loopback; never a range that other containers or clients share.
func TestCompose_OnlyHAProxyIsTrusted_ByItsFixedAddress(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../deploy/docker-compose.yml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Networks    map[string]struct {
				IPv4 string `yaml:"ipv4_address"`
			} `yaml:"networks"`
		} `yaml:"services"`
		Networks map[string]struct {
			IPAM struct {
				Config []struct {
					Subnet string `yaml:"subnet"`
				} `yaml:"config"`
			} `yaml:"ipam"`
		} `yaml:"networks"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	haproxy := doc.Services["haproxy"]
	addr := haproxy.Networks["default"].IPv4
	require.NotEmpty(t, addr, "HAProxy has a fixed address")
	assert.Equal(t, addr, haproxy.Environment["HAPROXY_SOURCE"], "and connects from it")
	require.Len(t, doc.Networks["default"].IPAM.Config, 1)
	_, subnet, err := net.ParseCIDR(doc.Networks["default"].IPAM.Config[0].Subnet)
	require.NoError(t, err)
	assert.True(t, subnet.Contains(net.ParseIP(addr)), "on the network's subnet")
	for _, svc := range []string{"api", "worker", "migrate"} {
		assert.Equal(t, addr, doc.Services[svc].Environment["TRUSTED_PROXIES"], svc)
	}
	plan := cluster.NewPlan(options(t.TempDir(), 1, 1))
	assert.Contains(t, plan.APIs[0].Env, "TRUSTED_PROXIES="+cluster.HAProxySource, "make cluster trusts HAProxy's address alone")
	assert.Contains(t, plan.HAProxy.Env, "HAPROXY_SOURCE="+cluster.HAProxySource)
}

// TestCompose_NoDefaultSecrets_TLSToPostgreSQL: every secret of the compose file is a required
// variable (compose stops without it), none has a default; every connection to PostgreSQL is TLS
// with the server's certificate verified, and the server runs with TLS on.
func TestCompose_NoDefaultSecrets_TLSToPostgreSQL(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../deploy/docker-compose.yml")
	require.NoError(t, err)
	text := string(raw)
	for _, secret := range []string{"POSTGRES_PASSWORD", "AUTH_JWT_SECRET", "PAYMENT_WEBHOOK_SECRET",
		"TEMPORAL_CODEC_KEY", "GRAFANA_ADMIN_PASSWORD"} {
		uses := regexp.MustCompile(`\$\{`+secret+`(:?[-?=+][^}]*)?\}`).FindAllStringSubmatch(text, -1)
		require.NotEmpty(t, uses, secret)
		for _, u := range uses {
			assert.True(t, strings.HasPrefix(u[1], ":?"), "%s is required, never defaulted: %s", secret, u[0])
		}
	}
	assert.NotContains(t, text, "sslmode=disable")
	services := readCompose(t)
	urls := 0
	for name, s := range services {
		if u, ok := s.Environment["DATABASE_URL"]; ok {
			urls++
			assert.Contains(t, u, "sslmode=verify-full", name)
			assert.Contains(t, u, "sslrootcert=", name)
		}
		if _, ok := s.Environment["SQL_HOST"]; ok {
			assert.Equal(t, "true", s.Environment["SQL_TLS"], "%s: Temporal's connections are TLS", name)
			assert.NotEmpty(t, s.Environment["SQL_TLS_CA_FILE"], name)
		}
	}
	assert.Equal(t, 3, urls, "migrate, worker and api")
	assert.Contains(t, strings.Join(services["postgres"].Entrypoint, " "), "-c ssl=on")
	server, err := os.ReadFile("../../../deploy/temporal-server.yaml")
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(server), `enabled: {{ env "SQL_TLS"`), "both stores")
	assert.Equal(t, 2, strings.Count(string(server), "enableHostVerification: true"))
}

// TestCompose_UISettingsAsTheCluster: the UI's codec message is the cluster's, one its YAML
// template can carry.
func TestCompose_UISettingsAsTheCluster(t *testing.T) {
	t.Parallel()
	services := readCompose(t)
	ui := services["temporal-ui"].Environment
	assert.Equal(t, cluster.CodecErrorMessage, ui["TEMPORAL_CODEC_DEFAULT_ERROR_MESSAGE"])
	assert.NotContains(t, cluster.CodecErrorMessage, ": ")
	assert.Equal(t, "true", ui["TEMPORAL_CODEC_INCLUDE_CREDENTIALS"])
	// The UI passes the person's token to an https:// codec endpoint only: HAProxy's codec frontend,
	// with the certs job's codec certificate, as the cluster's.
	assert.Equal(t, "${CODEC_ENDPOINT:-https://localhost:8443/codec}", ui["TEMPORAL_CODEC_ENDPOINT"])
	assert.True(t, strings.HasPrefix(options(t.TempDir(), 1, 1).CodecEndpoint(), "https://localhost:"))
	assert.Equal(t, "/tls/"+path.Base(cluster.PKI{Dir: "/tls"}.HAProxyBundle(cluster.IdentityCodec)),
		services["haproxy"].Environment["HAPROXY_CODEC_CERT"])
	assert.Contains(t, services["haproxy"].Volumes, "tls:/tls:ro")
}
