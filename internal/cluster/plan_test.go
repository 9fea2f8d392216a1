package cluster_test

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/cluster"
	"github.com/marketplace/checkout/internal/config"
)

func options(dir string, apis, workers int) cluster.Options {
	return cluster.Options{Dir: dir, Checkout: "/bin/checkout", TemporalServer: "/bin/temporal-server",
		SQLTool: "/bin/temporal-sql-tool", UIServer: "/bin/temporal-ui-server", HAProxy: "/usr/sbin/haproxy",
		APIs: apis, Workers: workers, HistoryShards: 16, Ports: cluster.DefaultPorts(), Namespace: "default",
		Secrets:       config.Secrets{JWT: "j", Webhook: "w", CodecKey: "k", CodecKeyID: "cluster-1"},
		PublicBaseURL: "http://localhost:8080", SetCurrent: "always"}
}

// envKeys are the names of the settings a process is given.
func envKeys(env []string) []string {
	var keys []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestPlan_EveryListenerOnLoopback_NoPortTwice: with the standard ports and with consecutive ones,
// at the most replicas, every process listens on 127.0.0.1 and no two on one port.
func TestPlan_EveryListenerOnLoopback_NoPortTwice(t *testing.T) {
	t.Parallel()
	for name, ports := range map[string]cluster.Ports{"standard": cluster.DefaultPorts(), "from 20000": cluster.PortsFrom(20000)} {
		o := options(t.TempDir(), cluster.MaxReplicas, cluster.MaxReplicas)
		o.Ports = ports
		seen := map[string]string{"127.0.0.1:" + strconv.Itoa(ports.Postgres): "postgres"}
		for _, p := range cluster.NewPlan(o).All() {
			for _, addr := range p.Listens {
				host, port, err := net.SplitHostPort(addr)
				require.NoError(t, err)
				assert.Equal(t, "127.0.0.1", host, "%s: %s %s", name, p.Name, addr)
				n, _ := strconv.Atoi(port)
				if name != "standard" {
					assert.Less(t, n, 20000+cluster.PortsSpan, "%s within the span", p.Name)
				}
				assert.NotContains(t, seen, addr, "%s: %s and %s", name, seen[addr], p.Name)
				seen[addr] = p.Name
			}
		}
	}
}

// TestHAProxyConfig_EveryReplica_CheckedOnReadyz: the rendered configuration names each replica
// once, checks each on /readyz, and is one HAProxy accepts.
func TestHAProxyConfig_EveryReplica_CheckedOnReadyz(t *testing.T) {
	t.Parallel()
	plan := cluster.NewPlan(options(t.TempDir(), 3, 1))
	cfg, err := cluster.HAProxyConfig(plan.APIs)
	require.NoError(t, err)
	for _, p := range plan.APIs {
		assert.Equal(t, 1, strings.Count(cfg, "server "+p.Name+" "+p.Listens[0]+" check\n"), p.Name)
	}
	assert.NotRegexp(t, `(?m)^\s*server-template`, cfg)
	assert.Contains(t, cfg, "option httpchk GET /readyz")
	assert.Contains(t, cfg, "option forwardfor")

	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it): the configuration was not checked by HAProxy itself")
	}
	file := t.TempDir() + "/haproxy.cfg"
	require.NoError(t, os.WriteFile(file, []byte(cfg), 0o644))
	check := exec.Command(haproxy, "-c", "-f", file)
	check.Env = append(os.Environ(), plan.HAProxy.Env...)
	out, err := check.CombinedOutput()
	require.NoError(t, err, string(out))
}

func TestCheckShards_FixedWhenFirstSetUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, cluster.CheckShards(dir, 16))
	require.NoError(t, cluster.CheckShards(dir, 16), "the same count again")
	err := cluster.CheckShards(dir, 32)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set up with 16 history shards, not 32")
}

func TestCheckFree_NamesTheAddressInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	err = cluster.CheckFree([]cluster.Process{{Name: "api-1", Listens: []string{l.Addr().String()}}})
	require.Error(t, err)
	assert.Equal(t, l.Addr().String()+" (api-1) is in use: stop what listens there, or move the cluster's ports with --ports-from", err.Error())
}
