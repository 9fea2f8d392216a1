// Tests that keep the deployment's monitoring in step with the product: every series the
// dashboard and the rules read is one the product exports or the rules record, every alert has
// its runbook section and its promtool cases, and the compose file serves them on loopback.
package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/internal/metrics"
)

const (
	dashboardFile = "grafana/checkout-order-flow.json"
	rulesFile     = "prometheus/rules.yml"
	testsFile     = "prometheus/tests.yml"
	runbookFile   = "../docs/runbook.md"
	composeFile   = "docker-compose.yml"
)

// builtins are the series Prometheus itself makes.
var builtins = []string{"up", "ALERTS", "ALERTS_FOR_STATE"}

type stubs struct{}

func (stubs) ActiveReservations(context.Context) (int64, error) { return 0, nil }
func (stubs) Lag(context.Context) (int64, time.Duration, error) { return 0, 0, nil }
func (stubs) Backlog(context.Context) (int64, time.Duration, error) {
	return 0, 0, nil
}
func (stubs) OrderFigures(context.Context) (metrics.OrderFigures, error) {
	return metrics.OrderFigures{Waiting: []metrics.WaitingOrders{{Status: "PENDING_PAYMENT"}}}, nil
}

// exported is every series name the product's processes serve: the families of a registry with
// every collector registered, the vectors (no series until first used) by their descriptions,
// and the Temporal SDK's as a worker serves them (temporalExported); with them the Temporal
// server's, as its services serve them to the `temporal` job (temporalServerExported).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	m.RegisterInventoryGauges(stubs{})
	m.RegisterAvailabilityGauges(stubs{})
	m.RegisterOutboxGauges(stubs{})
	m.RegisterOrderGauges(stubs{})
	m.RegisterCaches(func() metrics.CacheFigures { return metrics.CacheFigures{CartEnabled: true, TokenEnabled: true} })
	runs, _ := m.RegisterRetiredBuildRuns()
	runs.WithLabelValues("v1").Set(0)
	names := map[string]bool{}
	add := func(name string, histogram bool) {
		names[name] = true
		if histogram {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		add(f.GetName(), f.GetType().String() == "HISTOGRAM")
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, v := range []reflect.Value{reflect.ValueOf(m).Elem(), reflect.ValueOf(m.Jobs).Elem()} {
		for i := range v.NumField() {
			c, ok := v.Field(i).Interface().(prometheus.Collector)
			if _, registry := c.(*prometheus.Registry); !ok || registry || v.Field(i).IsNil() {
				continue
			}
			_, histogram := c.(*prometheus.HistogramVec)
			ch := make(chan *prometheus.Desc)
			go func() { c.Describe(ch); close(ch) }()
			for d := range ch {
				if match := fqName.FindStringSubmatch(d.String()); match != nil {
					add(match[1], histogram)
				}
			}
		}
	}
	for name := range temporalExported(t) {
		names[name] = true
	}
	for name := range temporalServerExported(t) {
		names[name] = true
	}
	return names
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr, For string
			Labels, Annotations      map[string]string
		}
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var rf ruleFile
	require.NoError(t, yaml.Unmarshal(raw, &rf))
	require.NotEmpty(t, rf.Groups)
	return rf
}

var (
	nameMatcher = regexp.MustCompile(`__name__\s*=~?\s*"([^"]*)"`)
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	labelLists  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	selectors   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	numbers     = regexp.MustCompile(`\b\d[\w.]*|\$\w+`)
	identifiers = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords    = []string{"and", "or", "unless", "offset", "bool", "inf", "nan", "group_left", "group_right"}
)

// seriesOf lists the series an expression reads: the names of its selectors, and the regular
// expressions of its {__name__=~"…"} selectors.
func seriesOf(expr string) (names []string, nameRegexps []string) {
	for _, m := range nameMatcher.FindAllStringSubmatch(expr, -1) {
		nameRegexps = append(nameRegexps, m[1])
	}
	expr = stringLit.ReplaceAllString(expr, "")
	expr = labelLists.ReplaceAllString(expr, "")
	expr = selectors.ReplaceAllString(expr, "")
	expr = numbers.ReplaceAllString(expr, "")
	for _, id := range identifiers.FindAllString(expr, -1) {
		if strings.HasSuffix(id, "(") || slices.Contains(keywords, strings.ToLower(id)) {
			continue // a function or an aggregation, or an operator
		}
		names = append(names, id)
	}
	return names, nameRegexps
}

// checkSeries fails for each series expr reads that is not in known.
func checkSeries(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	names, res := seriesOf(expr)
	if len(names) == 0 && len(res) == 0 {
		t.Errorf("%s: %q reads no series", where, expr)
	}
	for _, n := range names {
		assert.True(t, known[n], "%s: %s is neither exported by the product nor recorded by %s", where, n, rulesFile)
	}
	for _, re := range res {
		r := regexp.MustCompile("^(?:" + re + ")$")
		matched := 0
		for n := range known {
			if r.MatchString(n) {
				matched++
			}
		}
		assert.Positive(t, matched, "%s: {__name__=~%q} matches no series", where, re)
	}
}

func TestSeriesOf_NamesSelectorsOnly(t *testing.T) {
	t.Parallel()
	names, res := seriesOf(`sum by (route, le) (rate(checkout_x_bucket{status=~"5..",le!="1"}[5m] offset 15m)) / ignoring (group) ` +
		`group_left checkout:y:rate5m > 0.5 and time() - max(up) or label_replace(max by (__name__) ({__name__=~"a_(b|c)"}), "x", "$1", "y", "z") unless vector(0)`)
	assert.Equal(t, []string{"checkout_x_bucket", "checkout:y:rate5m", "up"}, names)
	assert.Equal(t, []string{"a_(b|c)"}, res)
}

func TestRules_ReadOnlySeriesTheProductExportsOrTheyRecord(t *testing.T) {
	t.Parallel()
	known := exported(t)
	for _, b := range builtins {
		known[b] = true
	}
	rf := readRules(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Record + r.Alert
			checkSeries(t, rulesFile+" "+name, r.Expr, known)
			if r.Record != "" {
				known[r.Record] = true // later rules may read it
			}
		}
	}
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(raw), "\n") {
		if title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")] = true
		}
	}
	return out
}

func TestRules_EveryAlertHasASeverityASummaryAndARunbookSection(t *testing.T) {
	t.Parallel()
	sections := anchors(t, runbookFile)
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			assert.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
			assert.NotEmpty(t, r.Annotations["description"], r.Alert)
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], "docs/runbook.md#")
			if assert.True(t, ok, "%s: runbook_url %q is not docs/runbook.md#…", r.Alert, r.Annotations["runbook_url"]) {
				assert.True(t, sections[anchor], "%s: docs/runbook.md has no section #%s", r.Alert, anchor)
				assert.Equal(t, strings.ToLower(r.Alert), anchor, "each alert has a section of its own name")
			}
		}
	}
	assert.Positive(t, alerts)
}

func TestRules_EveryAlertHasAPromtoolCaseThatFiresItAndOneThatDoesNot(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(testsFile)
	require.NoError(t, err)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &tests))
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				assert.True(t, fires[r.Alert], "%s: no case in %s where it fires", r.Alert, testsFile)
				assert.True(t, quiet[r.Alert], "%s: no case in %s where it stays quiet", r.Alert, testsFile)
			}
		}
	}
}

type panel struct {
	Title   string
	Type    string
	Targets []struct{ Expr string }
	Panels  []panel
}

func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		UID    string
		Panels []panel
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	require.NotEmpty(t, d.UID)
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func TestDashboard_EveryPanelReadsOnlySeriesThatExist(t *testing.T) {
	t.Parallel()
	known := exported(t)
	for _, b := range builtins {
		known[b] = true
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	for _, p := range dashboardPanels(t) {
		if assert.NotEmpty(t, p.Targets, "panel %q has no query", p.Title) {
			for _, target := range p.Targets {
				checkSeries(t, fmt.Sprintf("panel %q", p.Title), target.Expr, known)
			}
		}
	}
}

// TestDashboard_ShowsEveryFigureOfTheOrderFlow: the campaign day's list, each by a series some
// panel reads.
func TestDashboard_ShowsEveryFigureOfTheOrderFlow(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	for _, p := range dashboardPanels(t) {
		for _, target := range p.Targets {
			names, _ := seriesOf(target.Expr)
			for _, n := range names {
				read[n] = true
			}
			if strings.Contains(target.Expr, `status="NEEDS_ATTENTION"`) {
				read["NEEDS_ATTENTION"] = true
			}
		}
	}
	for figure, series := range map[string]string{
		"reservation success and failure rate": "checkout:reservation_failures:ratio5m",
		"reservations by result":               "checkout:reservation_results:rate5m",
		"active reservations":                  "checkout:active_reservations:max",
		"sweeper lag":                          "checkout:sweeper_lag_seconds:max",
		"orders waiting in the saga":           "checkout:orders_waiting:max",
		"orders in NEEDS_ATTENTION":            "NEEDS_ATTENTION",
		"payments UNKNOWN":                     "checkout:payments_unknown:max",
		"availability projection lag":          "checkout:availability_lag_seconds:max",
		"open-order cap refusals":              "checkout:open_orders_refused:rate5m",
		"rate-limit refusals":                  "checkout:rate_limited:rate5m",
		"API 5xx":                              "checkout:http_5xx:ratio5m",
		"API 503":                              "checkout:http_503:ratio5m",
		"outbox backlog":                       "checkout:outbox_lag_seconds:max",
		"POST /orders latency with exemplars":  "checkout_http_request_duration_seconds_bucket",
		"saga steps with exemplars":            "checkout_saga_step_duration_seconds_bucket",
		"workflow tasks waiting":               "checkout:temporal_workflow_task_schedule_to_start_seconds:p95_5m",
		"activities waiting":                   "checkout:temporal_activity_schedule_to_start_seconds:p95_5m",
		"workflow task failures":               "checkout:temporal_workflow_task_failures:rate5m",
		"tasks timed out":                      "checkout:temporal_tasks_timed_out:rate5m",
		"workflow tasks lost":                  "checkout:temporal_workflow_tasks_lost:rate5m",
		"sticky cache misses":                  "checkout:temporal_sticky_cache_miss:ratio5m",
		"pollers":                              "temporal_num_pollers",
		"free task slots":                      "checkout:temporal_task_slots_available:min",
		"history size":                         "checkout_workflow_history_events_bucket",
	} {
		assert.True(t, read[series], "no panel shows %s (%s)", figure, series)
	}
}

func TestCompose_PrometheusAndGrafanaOnLoopbackWithTheRulesAndDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	var c struct {
		Services map[string]struct {
			Ports   []string
			Volumes []string
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &c))
	mounts := map[string]string{}
	for _, name := range []string{"prometheus", "grafana"} {
		s, ok := c.Services[name]
		require.True(t, ok, "compose has a %s service", name)
		require.NotEmpty(t, s.Ports, name)
		for _, p := range s.Ports {
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond loopback", name, p)
		}
		for _, v := range s.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") {
				_, err := os.Stat(src)
				assert.NoError(t, err, "%s mounts %s", name, src)
				mounts[strings.TrimPrefix(src, "./")] = dst
			}
		}
	}
	for _, file := range []string{rulesFile, "prometheus/prometheus.yml", dashboardFile} {
		assert.Contains(t, mounts, file, "compose mounts %s", file)
	}
}
