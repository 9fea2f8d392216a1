package cluster

import (
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/deploy"
)

// A value given to the cluster replaces the product's own entry for its key (the server refuses a
// file that names a key twice) and leaves the product's other settings as they are.
func TestWithDynamicConfig_AGivenKeyReplacesTheProducts(t *testing.T) {
	raw, err := deploy.Files.ReadFile(deploy.TemporalDynamicConfig)
	if err != nil {
		t.Fatal(err)
	}
	out, err := withDynamicConfig(raw, []string{"matching.numTaskqueueReadPartitions=4", "history.example = 5s"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string][]map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	for key, want := range map[string]any{
		"matching.numTaskqueueReadPartitions":  4,
		"matching.numTaskqueueWritePartitions": 1,
		"system.enableActivityEagerExecution":  true,
		"history.example":                      "5s",
	} {
		if v := got[key]; len(v) != 1 || v[0]["value"] != want {
			t.Errorf("%s: %v, want one value %v", key, v, want)
		}
	}
	if _, err := withDynamicConfig(raw, []string{"no-equals-sign"}); err == nil {
		t.Error("a value without key=value was taken")
	}
}

// The shard writes a cluster lets be under way are the product's setting unless a value given to
// the cluster replaces it, and the server's one where neither names it.
func TestShardIOConcurrency_TheProductsOrTheGivenValue(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   int
	}{
		{nil, 4},
		{[]string{"history.shardIOConcurrency=1"}, 1},
		{[]string{"history.shardIOConcurrency=8", "matching.numTaskqueueReadPartitions=4"}, 8},
	} {
		if got, err := ShardIOConcurrency(c.values); err != nil || got != c.want {
			t.Errorf("%v: %d, %v; want %d", c.values, got, err, c.want)
		}
	}
	if _, err := ShardIOConcurrency([]string{"history.shardIOConcurrency=four"}); err == nil {
		t.Error("a value that is not a number was taken")
	}
}
