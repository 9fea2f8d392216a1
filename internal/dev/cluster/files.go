package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/deploy"
)

// WriteConfig writes what the processes of plan read into the data folder: the Temporal server's
// configuration and dynamic config, HAProxy's 503 answer and Jaeger's, all deploy/'s own files, HAProxy's with one
// server line per API replica; and the UI server's configuration, its own docker.yaml (the one
// the temporalio/ui image runs on) over a base that keeps it on loopback.
func WriteConfig(o Options, plan Plan) error {
	for _, f := range []struct{ from, to string }{
		{deploy.TemporalServer, filepath.Join(temporalConfigDir, TemporalEnv+".yaml")},
		{deploy.TemporalDynamicConfig, filepath.Join(temporalConfigDir, "dynamicconfig.yaml")},
		{deploy.HAProxyUnavailable, haproxyUnavailable},
		{deploy.Jaeger, jaegerConfig},
		{deploy.JaegerUI, deploy.JaegerUI},
	} {
		raw, err := deploy.Files.ReadFile(f.from)
		if err != nil {
			return err
		}
		if f.from == deploy.TemporalDynamicConfig && len(o.DynamicConfig) > 0 {
			if raw, err = withDynamicConfig(raw, o.DynamicConfig); err != nil {
				return err
			}
		}
		if err := write(filepath.Join(o.Dir, f.to), raw); err != nil {
			return err
		}
	}
	ui, err := os.ReadFile(filepath.Join(o.UIConfig, "docker.yaml"))
	if err != nil {
		return fmt.Errorf("the UI server's configuration: %w (`make tools` installs it)", err)
	}
	if err := write(filepath.Join(o.Dir, uiConfigDir, "docker.yaml"), ui); err != nil {
		return err
	}
	base := "# Written by checkout-dev cluster: the UI listens on this machine only.\nhost: 127.0.0.1\n"
	if err := write(filepath.Join(o.Dir, uiConfigDir, "base.yaml"), []byte(base)); err != nil {
		return err
	}
	cfg, err := HAProxyConfig(plan.APIs)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(o.Dir, haproxyConfig), []byte(cfg)); err != nil {
		return err
	}
	legacy := LegacyProxyConfig(o, "127.0.0.1:"+strconv.Itoa(o.Ports.Frontend))
	return write(filepath.Join(o.Dir, legacyProxyConfig), []byte(legacy))
}

// HAProxyConfig is deploy/haproxy.cfg with the replicas apis in place of its server-template line.
func HAProxyConfig(apis []Process) (string, error) {
	raw, err := deploy.Files.ReadFile(deploy.HAProxy)
	if err != nil {
		return "", err
	}
	var out []string
	replaced := false
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "server-template api-") {
			out = append(out, line)
			continue
		}
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		for _, p := range apis {
			out = append(out, fmt.Sprintf("%sserver %s %s check", indent, p.Name, p.Listens[0]))
		}
		replaced = true
	}
	if !replaced {
		return "", fmt.Errorf("%s has no server-template line for the API replicas", deploy.HAProxy)
	}
	return strings.Join(out, "\n"), nil
}

// state is what a cluster's data folder remembers of how it was set up.
type state struct {
	HistoryShards int `json:"historyShards"`
}

// DefaultHistoryShards is the history shard count of a new `make cluster` when none is asked for.
// On a developer's machine the CPUs saturate far below what 16 shards carry, and more shards cost
// idle CPU and memory: docs/benchmarks.md ("The shard counts chosen") has the measurement.
// Production's count is deploy/'s, chosen for the peak.
const DefaultHistoryShards = 16

// HistoryShards is the shard count a cluster on dir runs with: the count its folder was set up
// with when asked is 0 (so a folder keeps its count whatever the default becomes), asked when the
// folder is new or was set up with the same count, DefaultHistoryShards for a new folder when asked
// is 0. Another count than the folder's is refused: Temporal fixes it when a cluster is set up.
// Nothing is written: CheckShards records the count once the cluster may start.
func HistoryShards(dir string, asked int) (int, error) {
	recorded, err := recordedShards(dir)
	switch {
	case err != nil:
		return 0, err
	case recorded == 0 && asked == 0:
		return DefaultHistoryShards, nil
	case recorded == 0:
		return asked, nil
	case asked != 0 && asked != recorded:
		return 0, fmt.Errorf("this cluster was set up with %d history shards, not %d: Temporal cannot change them (use the same count, or another data folder)",
			recorded, asked)
	}
	return recorded, nil
}

// recordedShards is the count dir's cluster.json records (0: none yet).
func recordedShards(dir string) (int, error) {
	path := filepath.Join(dir, "cluster.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var s state
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return s.HistoryShards, nil
}

// CheckShards records the history shard count the first time and refuses another one later:
// Temporal fixes it when a cluster is set up.
func CheckShards(dir string, shards int) error {
	if _, err := HistoryShards(dir, shards); err != nil {
		return err
	}
	recorded, err := recordedShards(dir)
	if err != nil || recorded != 0 {
		return err
	}
	raw, err := json.Marshal(state{HistoryShards: shards})
	if err != nil {
		return err
	}
	return write(filepath.Join(dir, "cluster.json"), raw)
}

func write(path string, raw []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// withDynamicConfig is the product's dynamic config with more values, key=value (a YAML value),
// over it: a key given here replaces the product's own entry, since the server refuses a file
// that names a key twice.
func withDynamicConfig(raw []byte, values []string) ([]byte, error) {
	doc := map[string]any{}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", deploy.TemporalDynamicConfig, err)
	}
	for _, kv := range values {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("dynamic config %q: key=value", kv)
		}
		var value any
		if err := yaml.Unmarshal([]byte(strings.TrimSpace(v)), &value); err != nil {
			return nil, fmt.Errorf("dynamic config %q: %w", kv, err)
		}
		doc[k] = []map[string]any{{"value": value}}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# "+deploy.TemporalDynamicConfig+", with checkout-dev cluster --dynamic-config values over it.\n"), out...), nil
}

// ShardIOConcurrency is how many writes of one history shard the cluster's Temporal server lets
// be under way at once: history.shardIOConcurrency of the product's dynamic config with values
// over it (as the --dynamic-config flag gives them), the server's 1 where none names it.
func ShardIOConcurrency(values []string) (int, error) {
	raw, err := deploy.Files.ReadFile(deploy.TemporalDynamicConfig)
	if err != nil {
		return 0, err
	}
	if raw, err = withDynamicConfig(raw, values); err != nil {
		return 0, err
	}
	var doc map[string][]struct {
		Value any `yaml:"value"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return 0, fmt.Errorf("%s: %w", deploy.TemporalDynamicConfig, err)
	}
	entries := doc["history.shardIOConcurrency"]
	if len(entries) == 0 {
		return 1, nil
	}
	n, ok := entries[0].Value.(int)
	if !ok || n < 1 {
		return 0, fmt.Errorf("%s: history.shardIOConcurrency %v is not a positive whole number", deploy.TemporalDynamicConfig, entries[0].Value)
	}
	return n, nil
}
