package devprometheus_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
)

const rules = "../../../" + devprometheus.RulesFile

// apiGet reads one answer of Prometheus's HTTP API into out's data.
func apiGet(t *testing.T, prom *devprometheus.Server, path string, out any) {
	t.Helper()
	require.NoError(t, prom.API(context.Background(), path, out))
}

// TestStart_ScrapesTheTargetsAndEvaluatesTheProductsRules: the distribution's Prometheus, started
// as dev starts it, scrapes a live /metrics (up is 1), loads every rule of the product's rule file
// and evaluates them without error, answers every query of the dashboard, and is gone after Stop.
func TestStart_ScrapesTheTargetsAndEvaluatesTheProductsRules(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "a Prometheus server")
	m := metrics.New()
	m.ReserveResult("reserved")
	target := httptest.NewServer(m.Handler())
	t.Cleanup(target.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prom, err := devprometheus.Start(ctx, devprometheus.Options{Dir: t.TempDir(), Interval: time.Second,
		Targets: map[string][]string{"checkout": {strings.TrimPrefix(target.URL, "http://")}}, Rules: []string{rules}})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			prom.Stop()
		}
	})
	require.True(t, strings.HasPrefix(prom.URL, "http://127.0.0.1:"), prom.URL)

	type sample struct {
		Metric map[string]string
		Value  [2]any
	}
	up := func() string {
		var r struct{ Result []sample }
		apiGet(t, prom, "/api/v1/query?query="+url.QueryEscape(`up{job="checkout"}`), &r)
		if len(r.Result) == 0 {
			return ""
		}
		return r.Result[0].Value[1].(string)
	}
	type rule struct{ Name, Health, LastError string }
	var groups struct{ Groups []struct{ Rules []rule } }
	evaluated := func() bool {
		apiGet(t, prom, "/api/v1/rules", &groups)
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Health == "unknown" {
					return false
				}
			}
		}
		return len(groups.Groups) > 0
	}
	require.Eventually(t, func() bool { return up() == "1" && evaluated() }, 30*time.Second, 200*time.Millisecond,
		"up of the target, and every rule evaluated once")

	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			assert.Equal(t, "ok", r.Health, "%s: %s", r.Name, r.LastError)
			n++
		}
	}
	assert.Equal(t, ruleCount(t), n, "every rule of the file is loaded")

	// The dashboard's queries are PromQL this Prometheus accepts.
	for _, expr := range dashboardQueries(t) {
		var r struct{ ResultType string }
		apiGet(t, prom, "/api/v1/query?query="+url.QueryEscape(expr), &r)
		assert.NotEmpty(t, r.ResultType, expr)
	}

	prom.Stop()
	stopped = true
	_, err = http.Get(prom.URL + "/-/ready")
	assert.Error(t, err, "nothing listens after Stop")
}

// ruleCount is how many rules the product's rule file holds.
func ruleCount(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(rules)
	require.NoError(t, err)
	var file struct {
		Groups []struct{ Rules []map[string]any }
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	n := 0
	for _, g := range file.Groups {
		n += len(g.Rules)
	}
	return n
}

// dashboardQueries are the expressions of the dashboard's panels.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../../deploy/grafana/checkout-order-flow.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct{ Targets []struct{ Expr string } }
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	var out []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out = append(out, target.Expr)
		}
	}
	require.NotEmpty(t, out)
	return out
}
