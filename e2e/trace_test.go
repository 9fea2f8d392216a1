package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/devjaeger"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

// jaegerTrace is a trace as Jaeger's query API answers it.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string
			Value any
		} `json:"tags"`
		ProcessID string `json:"processID"`
		Duration  int64  `json:"duration"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// span is one span of a trace with its service and tags, as a test reads it.
type span struct {
	id, parent, name, service string
	tags                      map[string]string
}

func (tr jaegerTrace) spans() []span {
	var out []span
	for _, s := range tr.Spans {
		sp := span{id: s.SpanID, name: s.OperationName, service: tr.Processes[s.ProcessID].ServiceName, tags: map[string]string{}}
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" {
				sp.parent = r.SpanID
			}
		}
		for _, t := range s.Tags {
			sp.tags[t.Key] = fmt.Sprint(t.Value)
		}
		out = append(out, sp)
	}
	return out
}

// jaegerTraceOf reads a trace from Jaeger's query API (nil while Jaeger has none of it).
func jaegerTraceOf(t *testing.T, jaegerURL, traceID string) *jaegerTrace {
	t.Helper()
	resp, err := http.Get(jaegerURL + "/api/traces/" + traceID)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body struct{ Data []jaegerTrace }
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	require.NoError(t, dec.Decode(&body))
	if len(body.Data) == 0 {
		return nil
	}
	return &body.Data[0]
}

// lockedBuffer is a process's output, read while the process writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// apiProcess runs `checkout api` on addr against this stack's database and Temporal task queue,
// with env (KEY=value pairs) applied last; its log goes to logs (nil: discarded).
func (s *stack) apiProcess(bin, addr string, logs io.Writer, env ...string) *exec.Cmd {
	s.t.Helper()
	cmd := exec.Command(bin, "api")
	cmd.Env = append(cleanEnv(),
		"DATABASE_URL="+s.cfg.DatabaseURL,
		"TEMPORAL_ADDRESS="+s.cfg.TemporalAddress,
		"TEMPORAL_TASK_QUEUE="+s.cfg.TaskQueue,
		"HTTP_ADDR="+addr,
		"METRICS_ADDR="+freeAddr(s.t),
		"PUBLIC_BASE_URL=http://"+addr,
		"AUTH_JWT_SECRET="+s.cfg.JWTSecret,
		"PAYMENT_WEBHOOK_SECRET="+s.cfg.PaymentWebhookSecret,
		"PAYMENT_PROVIDER="+s.cfg.PaymentProvider,
		"TEMPORAL_CODEC_KEY="+base64.StdEncoding.EncodeToString(s.cfg.CodecKey.Secret),
		"TEMPORAL_CODEC_KID="+s.cfg.CodecKey.ID,
		"NATS_URL="+s.cfg.Events.NATSURL,
		"EVENTS_PREFIX="+s.cfg.Events.Prefix, "EVENTS_MAX_MB="+testenv.TestEventsMaxMB,
		"LOG_LEVEL=warn",
		"TEMPORAL_ALLOW_PLAINTEXT=true",
		"AUTH_OIDC_ISSUER=https://id.example", "AUTH_OIDC_AUDIENCE=temporal-ui", "AUTH_OIDC_JWKS_URL=http://127.0.0.1:1/keys",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = logs
	if os.Getenv("E2E_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(s.t, cmd.Start())
	return cmd
}

func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
}

// TestTrace_OneOrderFromRequestToSQL: a 3-D Secure order placed through `checkout api` and run by
// `checkout worker`, two processes that send their traces to the pinned Jaeger, is one trace
// there, continued from the caller's W3C traceparent: the API's POST /orders, the
// update-with-start, the workflow run, its activities (named with the order), their SQL
// statements and the payment provider's calls, and the steps after the shopper's 3-D Secure
// answer; then past the outbox: the relay's publish of the order's events, the availability
// projector's processing of its stock.changed and the sellers' webhooks fan-out's of its order
// events. No span carries a statement's parameters, the card token or the shopper's address.
func TestTrace_OneOrderFromRequestToSQL(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jaeger, err := devjaeger.Start(ctx, devjaeger.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(jaeger.Stop)

	// The worker process alone relays and consumes the events, in its traces.
	s := startStack(t, stackOptions{noWorker: true, noLoops: true})
	addr := freeAddr(t)
	base := "http://" + addr
	traces := []string{"TRACES_ENDPOINT=" + jaeger.TracesEndpoint, "TRACES_SAMPLE_RATIO=1"}
	w := s.workerProcess(bin, append([]string{"PUBLIC_BASE_URL=" + base, "PAYMENT_WEBHOOK_URL=" + base + "/api/v1/payments/webhook"},
		traces...)...)
	t.Cleanup(func() { stopProcess(w) })
	var apiLog lockedBuffer
	apiMetrics := freeAddr(t)
	// The API outside dev takes tokens from its identity provider alone: a JWKS of the test's.
	idp := newTestIdP(t)
	s.tokens = idp
	a := s.apiProcess(bin, addr, &apiLog, append(traces, "LOG_LEVEL=info", "METRICS_ADDR="+apiMetrics,
		"AUTH_OIDC_ISSUER="+idp.issuer, "AUTH_OIDC_AUDIENCE="+idp.audience, "AUTH_OIDC_JWKS_URL="+idp.srv.URL)...)
	t.Cleanup(func() { stopProcess(a) })
	waitFor(t, base+"/readyz", func(got) bool { return true })
	s.base = base

	sh := s.shopper(7101)
	sh.fill(map[int64]int32{71: 1})
	pv := sh.preview()
	traceID := randomHex(16)
	r := s.call(http.MethodPost, "/api/v1/orders", sh.token,
		[]string{"Idempotency-Key", "trace-" + randomHex(4), "traceparent", "00-" + traceID + "-" + randomHex(8) + "-01"},
		map[string]any{"priceVersion": pv, "addressId": sh.address, "paymentMethodToken": "tok_3ds"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	orderID := r.int("orderId")
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	require.Equal(t, "CONFIRMED", s.waitFinal(sh.token, orderID, time.Minute).str("status"))

	// The spans arrive in batches (every few seconds from each process); the workflow's run ends
	// with the order.
	var spans []span
	has := func(service, prefix string) bool {
		for _, sp := range spans {
			if sp.service == service && strings.HasPrefix(sp.name, prefix) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if tr := jaegerTraceOf(t, jaeger.URL, traceID); tr != nil {
			spans = tr.spans()
			if has("checkout-api", "POST /api/v1/orders") && has("checkout-worker", "RunWorkflow:OrderWorkflow") &&
				has("checkout-worker", "RunActivity:CaptureFinish") && has("checkout-worker", "payment capture") &&
				has("checkout-worker", "publish order.confirmed") && has("checkout-worker", "process stock.changed") &&
				has("checkout-worker", "process order.confirmed") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not complete in Jaeger within a minute; spans: %v", traceID, names(spans))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Jaeger serves the traces' page at the address make run prints, for any path of it.
	page, err := fetch(jaeger.URL + "/trace/" + traceID)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, page.body, "<title>Traces · checkout</title>")

	byID := map[string]span{}
	for _, sp := range spans {
		byID[sp.id] = sp
	}
	// ancestor finds the nearest ancestor of sp whose name begins with prefix.
	ancestor := func(sp span, prefix string) (span, bool) {
		for p, ok := byID[sp.parent]; ok; p, ok = byID[p.parent] {
			if strings.HasPrefix(p.name, prefix) {
				return p, true
			}
		}
		return span{}, false
	}
	order := strconv.FormatInt(orderID, 10)
	var request, update, activity, statement, provider, published, projected, fannedOut bool
	for _, sp := range spans {
		switch {
		case sp.service == "checkout-api" && sp.name == "POST /api/v1/orders":
			request = true
			assert.Equal(t, order, sp.tags["order.id"], "the request's span names its order")
		case sp.service == "checkout-api" && strings.HasPrefix(sp.name, "UpdateWithStartWorkflow:"):
			_, under := ancestor(sp, "POST /api/v1/orders")
			update = under
		case sp.service == "checkout-worker" && strings.HasPrefix(sp.name, "RunActivity:") && sp.tags["order.id"] == order:
			if _, ok := ancestor(sp, "RunWorkflow:OrderWorkflow"); ok {
				activity = true
			}
		case sp.service == "checkout-worker" && sp.tags["db.query.text"] != "":
			if act, ok := ancestor(sp, "RunActivity:"); ok && act.tags["order.id"] == order {
				statement = true
			}
		case sp.service == "checkout-worker" && sp.name == "payment authorize":
			provider = sp.tags["payment.key"] != ""
		case sp.service == "checkout-worker" && sp.name == "publish stock.changed":
			// The relay's publish is a child of the change that wrote the event: the hold's.
			_, underActivity := ancestor(sp, "RunActivity:")
			published = underActivity && sp.tags["span.kind"] == "producer"
		case sp.service == "checkout-worker" && sp.name == "process stock.changed":
			_, underPublish := ancestor(sp, "publish stock.changed")
			projected = underPublish && sp.tags["span.kind"] == "consumer" && sp.tags["messaging.consumer.group.name"] == "availability"
		case sp.service == "checkout-worker" && strings.HasPrefix(sp.name, "process order."):
			_, underPublish := ancestor(sp, "publish order.")
			fannedOut = fannedOut || (underPublish && sp.tags["messaging.consumer.group.name"] == "seller-webhooks")
		}
		for k, v := range sp.tags {
			assert.NotContains(t, []string{"db.query.parameters", "pgx.query.parameters", "client.address",
				"http.client_ip", "user_agent.original", "net.sock.peer.addr"}, k, "%s carries %s", sp.name, k)
			assert.NotContains(t, v, "tok_3ds", "%s's %s holds the card token", sp.name, k)
		}
	}
	assert.True(t, request, "the API's POST /orders span")
	assert.True(t, update, "the update-with-start under the request")
	assert.True(t, activity, "an activity of order %d under its workflow's run", orderID)
	assert.True(t, statement, "a SQL statement under an activity of order %d", orderID)
	assert.True(t, provider, "the provider's authorize call")
	assert.True(t, published, "the relay's publish of the hold's stock.changed, under the hold's activity")
	assert.True(t, projected, "the availability projector's span of that stock.changed, under its publish")
	assert.True(t, fannedOut, "the webhooks fan-out's span of an order event, under its publish")
	for _, step := range []string{"RunActivity:VerifyEvent", "RunActivity:Confirm", "RunActivity:CaptureFinish"} {
		assert.True(t, has("checkout-worker", step), "%s: the steps after the shopper's 3-D Secure answer", step)
	}

	// The access log names the order and the trace of each request that served it.
	logged := map[string]map[string]any{}
	for _, line := range strings.Split(apiLog.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "http request" {
			logged[fmt.Sprint(l["method"], " ", l["route"])] = l
		}
	}
	for _, route := range []string{"POST /api/v1/orders", "GET /api/v1/orders/:orderId"} {
		l := logged[route]
		require.NotNil(t, l, "the access log has %s: %s", route, apiLog.String())
		assert.Equal(t, float64(orderID), l["order_id"], route)
		assert.Len(t, l["trace_id"], 32, route)
		assert.Len(t, l["span_id"], 16, route)
	}
	assert.Equal(t, traceID, logged["POST /api/v1/orders"]["trace_id"], "the order's request logs the trace it continued")

	// POST /orders' latency histogram links a bucket to the order's trace (an exemplar, served in
	// the OpenMetrics format Prometheus asks for).
	req, err := http.NewRequest(http.MethodGet, "http://"+apiMetrics+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Regexp(t, `checkout_http_request_duration_seconds_bucket\{method="POST",route="/api/v1/orders",le="[^"]+"\} \d+ # \{trace_id="`+traceID+`"\}`,
		string(body), "an exemplar of POST /orders names the order's trace")
	if t.Failed() {
		for _, sp := range spans {
			t.Logf("%s %s %s parent %s (%s) %v", sp.service, sp.id, sp.name, sp.parent, byID[sp.parent].name, sp.tags)
		}
	}
}

func names(spans []span) []string {
	var out []string
	for _, sp := range spans {
		out = append(out, sp.service+":"+sp.name)
	}
	return out
}

// testIdP is an identity provider of a test: a JWKS of one RSA key, and the tokens it signs for
// shoppers and sellers (RS256, its issuer, its audience, ten minutes), as an API outside dev takes.
type testIdP struct {
	key              *rsa.PrivateKey
	srv              *httptest.Server
	issuer, audience string
}

func newTestIdP(t *testing.T) *testIdP {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	p := &testIdP{key: key, issuer: "https://id.example", audience: "temporal-ui"}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "test", Algorithm: "RS256", Use: "sig"}}})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *testIdP) sign(c jwt.MapClaims) (string, error) {
	now := time.Now()
	c["iss"], c["aud"], c["iat"], c["exp"] = p.issuer, p.audience, now.Unix(), now.Add(10*time.Minute).Unix()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = "test"
	return tok.SignedString(p.key)
}

func (p *testIdP) Shopper(_ context.Context, user int64) (string, error) {
	return p.sign(jwt.MapClaims{"sub": strconv.FormatInt(user, 10), "role": auth.RoleShopper})
}

func (p *testIdP) Seller(_ context.Context, seller int64) (string, error) {
	return p.sign(jwt.MapClaims{"sub": strconv.FormatInt(1000+seller, 10), "role": auth.RoleSeller,
		"seller_id": strconv.FormatInt(seller, 10)})
}
