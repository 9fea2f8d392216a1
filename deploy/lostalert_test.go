package deploy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

// The alert on lost workflow tasks, on a live server: Prometheus with the product's rules scrapes a
// dev server of the pinned CLI as the `temporal` job, and CheckoutWorkflowTasksLost stays quiet
// while one started task has been timed out, then is pending (its `for` is five minutes) once
// five more have been, more than three in five minutes.
func TestRules_WorkflowTasksLost_PendingOnALiveServer(t *testing.T) {
	testenv.SkipIfShort(t, "a Temporal dev server and Prometheus")
	// Not parallel: its worker would share the process's sticky cache with the SDK probe's
	// (temporalExported), whose size that probe sets to see a miss.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := startLosingServer(ctx, "deploy-alert-probe")
	require.NoError(t, err)
	defer srv.stop()
	prom, err := devprometheus.Start(ctx, devprometheus.Options{Dir: t.TempDir(), Interval: time.Second,
		Targets: map[string][]string{"temporal": {srv.metrics}}, Rules: []string{"../" + devprometheus.RulesFile}})
	require.NoError(t, err)
	defer prom.Stop()

	// Prometheus sees the counter's series appear with the first task lost; only what it adds
	// after that is an increase, so the first comes on its own.
	require.NoError(t, srv.lose(ctx, 1))
	require.Eventually(t, func() bool {
		return len(promQuery(t, prom.URL, `start_to_close_timeout{job="temporal",operation="TimerActiveTaskWorkflowTaskTimeout"}`)) > 0
	}, time.Minute, 250*time.Millisecond, "Prometheus reads the server's count of timed-out workflow tasks")
	time.Sleep(3 * time.Second) // a few evaluations of the rule
	assert.Empty(t, alertState(t, prom.URL, "CheckoutWorkflowTasksLost"), "one task lost is not an alert")

	require.NoError(t, srv.lose(ctx, 5))
	require.Eventually(t, func() bool {
		s := alertState(t, prom.URL, "CheckoutWorkflowTasksLost")
		return s == "pending" || s == "firing"
	}, time.Minute, 250*time.Millisecond, "five more tasks lost put the alert in pending")
}

// promQuery is the result of an instant query of Prometheus's HTTP API.
func promQuery(t *testing.T, base, query string) []json.RawMessage {
	t.Helper()
	var body struct {
		Data struct{ Result []json.RawMessage }
	}
	promGet(t, base+"/api/v1/query?query="+url.QueryEscape(query), &body)
	return body.Data.Result
}

// alertState is the state of the named alert: "" (inactive), pending or firing.
func alertState(t *testing.T, base, name string) string {
	t.Helper()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	promGet(t, base+"/api/v1/alerts", &body)
	for _, a := range body.Data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State
		}
	}
	return ""
}

func promGet(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, u)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}
