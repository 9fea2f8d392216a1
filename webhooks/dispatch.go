package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/webhooks/internal/webhookstore"
)

// Observer receives each attempt's result; *metrics.Metrics is one.
type Observer interface {
	WebhookAttempt(result string, latency time.Duration)
}

type noObserver struct{}

func (noObserver) WebhookAttempt(string, time.Duration) {}

// Attempt results, as counted.
const (
	ResultDelivered = "delivered"
	ResultFailed    = "failed"
	ResultGivenUp   = "given_up"
)

// Dispatcher sends the deliveries: each endpoint's in event order, one at a time, by one
// dispatcher at a time (a lease on the endpoint), up to Concurrency endpoints at once, each
// request bounded by Timeout; so a slow or failing endpoint takes one slot and holds back only its
// own deliveries. A failed delivery is tried again with exponential back-off and jitter
// (RetryBase doubling up to RetryMax) for RetryFor from its first failure; then it is given up and
// its endpoint disabled, which writes a webhook.endpoint_disabled event for the seller.
type Dispatcher struct {
	Pool    *pgxpool.Pool
	Targets Targets
	Log     *slog.Logger
	Obs     Observer

	Concurrency int
	Timeout     time.Duration
	RetryFor    time.Duration
	RetryBase   time.Duration
	RetryMax    time.Duration
	// Interval is how often an idle dispatcher looks for due deliveries.
	Interval time.Duration
	// Tracing makes the deliveries' spans; nil means the process's (otel's global).
	Tracing trace.TracerProvider

	client *http.Client
}

// Defaults of the dispatcher.
const (
	DefaultConcurrency = 32
	DefaultTimeout     = 10 * time.Second
	DefaultRetryFor    = 24 * time.Hour
	DefaultRetryBase   = 5 * time.Second
	DefaultRetryMax    = time.Hour
)

func (d *Dispatcher) defaults() {
	if d.Concurrency <= 0 {
		d.Concurrency = DefaultConcurrency
	}
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	if d.RetryFor <= 0 {
		d.RetryFor = DefaultRetryFor
	}
	if d.RetryBase <= 0 {
		d.RetryBase = DefaultRetryBase
	}
	if d.RetryMax <= 0 {
		d.RetryMax = DefaultRetryMax
	}
	if d.Interval <= 0 {
		d.Interval = 500 * time.Millisecond
	}
	if d.Obs == nil {
		d.Obs = noObserver{}
	}
	if d.client == nil {
		d.client = d.Targets.Client(d.Timeout)
	}
}

// lease is how long a dispatcher holds an endpoint: longer than one attempt, renewed between them.
func (d *Dispatcher) lease() time.Duration { return 2*d.Timeout + 30*time.Second }

// Run dispatches until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.defaults()
	slots := make(chan struct{}, d.Concurrency)
	for {
		free := d.Concurrency - len(slots)
		var claimed []webhookstore.ClaimWebhookEndpointsRow
		var err error
		if free > 0 {
			claimed, err = webhookstore.New(d.Pool).ClaimWebhookEndpoints(ctx, d.lease().Seconds(), int32(free))
		}
		if err != nil && ctx.Err() == nil {
			d.Log.Warn("webhooks: claiming endpoints", "error", err)
		}
		for _, ep := range claimed {
			slots <- struct{}{}
			go func() {
				defer func() { <-slots }()
				d.endpoint(ctx, ep)
			}()
		}
		wait := d.Interval
		if len(claimed) == free && free > 0 {
			wait = 10 * time.Millisecond // more may be due
		}
		select {
		case <-ctx.Done():
			for range cap(slots) { // let the endpoints in flight finish their attempt
				slots <- struct{}{}
			}
			return nil
		case <-time.After(wait):
		}
	}
}

// endpoint sends an endpoint's due deliveries in order until one fails, none is due or the
// context ends; then it lets the endpoint go.
func (d *Dispatcher) endpoint(ctx context.Context, ep webhookstore.ClaimWebhookEndpointsRow) {
	q := webhookstore.New(d.Pool)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = q.ReleaseWebhookEndpoint(rctx, ep.ID)
	}()
	for ctx.Err() == nil {
		next, err := q.NextWebhookDelivery(ctx, ep.ID)
		if err != nil || next.NextAttemptAt.After(time.Now()) {
			return
		}
		if n, err := q.ExtendWebhookLease(ctx, d.lease().Seconds(), ep.ID); err != nil || n == 0 {
			return // disabled meanwhile
		}
		if !d.attempt(ctx, ep, next) {
			return
		}
	}
}

// attempt sends one delivery and records it; true when it was delivered.
func (d *Dispatcher) attempt(ctx context.Context, ep webhookstore.ClaimWebhookEndpointsRow, del webhookstore.NextWebhookDeliveryRow) bool {
	q := webhookstore.New(d.Pool)
	secrets, err := q.WebhookSigningSecrets(ctx, ep.ID)
	if err != nil || len(secrets) == 0 {
		d.Log.Error("webhooks: no secret to sign with", "endpoint_id", ep.ID, "error", err)
		return false
	}
	code, latency, sendErr := d.send(ctx, ep.Url, strconv.FormatInt(del.EventID, 10), del.Body, secrets)
	if ctx.Err() != nil {
		return false // stopping: the attempt is not counted, the delivery goes out again
	}
	ms := int32(latency.Milliseconds())
	var codePtr *int32
	if code > 0 {
		c := int32(code)
		codePtr = &c
	}
	var errText *string
	if sendErr != nil {
		t := sendErr.Error()
		errText = &t
	}
	if err := q.RecordWebhookAttempt(ctx, webhookstore.RecordWebhookAttemptParams{DeliveryID: del.ID, StatusCode: codePtr,
		LatencyMs: ms, Error: errText, Replay: del.Replay}); err != nil {
		d.Log.Warn("webhooks: recording an attempt", "delivery_id", del.ID, "error", err)
	}
	if sendErr == nil {
		d.Obs.WebhookAttempt(ResultDelivered, latency)
		if err := q.WebhookDelivered(ctx, codePtr, &ms, del.ID); err != nil {
			d.Log.Warn("webhooks: recording a delivery", "delivery_id", del.ID, "error", err)
			return false
		}
		return true
	}
	failedSince := time.Now()
	if del.FirstFailedAt != nil {
		failedSince = *del.FirstFailedAt
	}
	if time.Since(failedSince) >= d.RetryFor {
		reason := fmt.Sprintf("delivery of event %d failed for %s (last: %s)", del.EventID, d.RetryFor, sendErr)
		if _, err := q.GiveUpWebhookEndpoint(ctx, reason, del.ID); err != nil && !db.NotFound(err) {
			d.Log.Warn("webhooks: disabling an endpoint", "endpoint_id", ep.ID, "error", err)
		}
		d.Obs.WebhookAttempt(ResultGivenUp, latency)
		d.Log.Warn("webhooks: endpoint disabled after failing deliveries", "endpoint_id", ep.ID, "seller_id", ep.SellerID,
			"event_id", del.EventID, "error", sendErr)
		return false
	}
	d.Obs.WebhookAttempt(ResultFailed, latency)
	if err := q.WebhookFailed(ctx, webhookstore.WebhookFailedParams{ID: del.ID, StatusCode: codePtr, Error: errText,
		LatencyMs: &ms, RetryInSeconds: d.backoff(del.Attempts + 1).Seconds()}); err != nil {
		d.Log.Warn("webhooks: recording a failed attempt", "delivery_id", del.ID, "error", err)
	}
	return false
}

// backoff is the wait before attempt n+1: RetryBase doubling per attempt up to RetryMax, with
// jitter (between half and all of it), so that endpoints that failed together are not tried
// again together.
func (d *Dispatcher) backoff(attempts int32) time.Duration {
	wait := d.RetryMax
	if attempts < 30 {
		wait = min(d.RetryBase<<max(attempts-1, 0), d.RetryMax)
	}
	return wait/2 + rand.N(wait/2+1)
}

// ErrStatus is an answer other than 2xx.
var ErrStatus = errors.New("endpoint answered")

// send POSTs one delivery, signed; a 2xx answer is a delivery. When the event carries a trace
// context (the body's traceparent, its publish), the attempt is a client span of that trace and
// the request carries the span's traceparent and tracestate headers.
func (d *Dispatcher) send(ctx context.Context, url, id string, body []byte, secrets [][]byte) (code int, latency time.Duration, err error) {
	var tc struct {
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	_ = json.Unmarshal(body, &tc)
	if parent, ok := events.RemoteContext(ctx, tc.TraceParent, tc.TraceState); ok {
		var span trace.Span
		ctx, span = events.Tracer(d.Tracing).Start(parent, "webhook delivery", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("http.request.method", http.MethodPost),
				attribute.String("webhook.event_id", id)))
		defer func() {
			if code > 0 {
				span.SetAttributes(attribute.Int("http.response.status_code", code))
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
	}
	at := time.Now()
	sig, err := Sign(secrets, id, at, body)
	if err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "checkout-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	propagation.TraceContext{}.Inject(rctx, propagation.HeaderCarrier(req.Header))
	resp, err := d.client.Do(req)
	latency = time.Since(at)
	if err != nil {
		return 0, latency, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, latency, fmt.Errorf("%w %s", ErrStatus, resp.Status)
	}
	return resp.StatusCode, latency, nil
}
