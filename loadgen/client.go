package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// client sends the generator's requests; with a recorder, it records each one, and with
// retryFor, it repeats those a fault answered (Config.RetryFor).
type client struct {
	base     string
	http     *http.Client
	rec      *recorder
	retryFor time.Duration
	observe  func(Observation)
}

// answer is an HTTP answer: status, the error code of an error body and the order it names, the
// body, and Retry-After (in whole seconds, as the API sends it; 0 when absent). faults counts the
// tries before it that a fault answered.
type answer struct {
	status     int
	code       string
	orderID    int64
	body       []byte
	retryAfter time.Duration
	faults     int
}

// Observation is one request as Config.Observe is told of it: sent at Sent, answered (or failed)
// at Done with Status (0: no answer, Code then names the failure) and the error body's Code.
type Observation struct {
	Endpoint   string
	Sent, Done time.Time
	Status     int
	Code       string
	RetryAfter time.Duration
}

// Fault says whether an observation is an answer a client should repeat the request on: none at
// all, or a 502, 503 or 504 other than a refusal of the checkout's own (BUSY: admission control;
// PAYMENT_UNAVAILABLE: the provider).
func (o Observation) Fault() bool {
	switch o.Status {
	case 0:
		return o.Code != "CANCELED"
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	case http.StatusServiceUnavailable:
		return o.Code != codeBusy && o.Code != "PAYMENT_UNAVAILABLE"
	}
	return false
}

// Back-off between tries of a request a fault answered without a Retry-After.
const (
	retryFirst = 250 * time.Millisecond
	retryMost  = 2 * time.Second
)

// send runs one request; with retryFor, it sends it again while a fault answers it (after the
// answer's Retry-After, or a back-off), until another answer or retryFor after the first try. The
// last try's answer or failure is returned.
func (c *client) send(ctx context.Context, r request) (answer, error) {
	first := time.Now()
	backoff := retryFirst
	faults := 0
	for {
		a, o, err := c.sendOnce(ctx, r)
		a.faults = faults
		// A request that was never sent (o.Sent zero) is not repeated: nothing would change. Nor is
		// an order the answer says was given up: its key is spent (a new key places it again).
		if c.retryFor <= 0 || o.Sent.IsZero() || !o.Fault() || a.givenUp() || time.Since(first) >= c.retryFor {
			return a, err
		}
		faults++
		wait := backoff
		if a.retryAfter > 0 {
			wait = a.retryAfter
		}
		backoff = min(2*backoff, retryMost)
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (a answer) decode(v any) error { return json.Unmarshal(a.body, v) }

// givenUp says whether the answer is a fault that names an order: that order failed and its
// Idempotency-Key is spent, so repeating it would only be answered the same.
func (a answer) givenUp() bool { return a.status >= 500 && a.orderID > 0 }

type request struct {
	endpoint string
	method   string
	url      string // absolute, or a path under base
	token    string
	header   http.Header
	json     any
	form     url.Values
}

// sendOnce runs one request. A transport failure is an error (and recorded as status 0).
func (c *client) sendOnce(ctx context.Context, r request) (answer, Observation, error) {
	target := r.url
	if strings.HasPrefix(target, "/") {
		target = c.base + target
	}
	var body io.Reader
	ctype := ""
	switch {
	case r.form != nil:
		body, ctype = strings.NewReader(r.form.Encode()), "application/x-www-form-urlencoded"
	case r.json != nil:
		b, err := json.Marshal(r.json)
		if err != nil {
			return answer{}, Observation{}, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return answer{}, Observation{}, err
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	o := Observation{Endpoint: r.endpoint, Sent: time.Now()}
	resp, err := c.http.Do(req)
	if err != nil {
		o.Code = transportCode(err)
		c.record(o)
		return answer{}, o, fmt.Errorf("%s: %w", r.endpoint, err)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		o.Code = transportCode(err)
		c.record(o)
		return answer{}, o, fmt.Errorf("%s: %w", r.endpoint, err)
	}
	a := answer{status: resp.StatusCode, body: raw}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		a.retryAfter = time.Duration(secs) * time.Second
	}
	if a.status >= 400 {
		var e struct {
			Code    string `json:"code"`
			OrderID int64  `json:"orderId"`
		}
		if json.Unmarshal(raw, &e) == nil {
			a.code, a.orderID = e.Code, e.OrderID
		}
	}
	o.Status, o.Code, o.RetryAfter = a.status, a.code, a.retryAfter
	c.record(o)
	return a, o, nil
}

// record counts a measured request and tells Config.Observe of it.
func (c *client) record(o Observation) {
	if o.Done.IsZero() {
		o.Done = time.Now()
	}
	if c.rec != nil {
		c.rec.observe(o.Endpoint, o.Status, o.Code, o.Done.Sub(o.Sent))
		if c.observe != nil {
			c.observe(o)
		}
	}
}

// transportCode names a failure without an answer.
func transportCode(err error) string {
	var ue *url.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "CANCELED"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ue) && ue.Timeout():
		return "TIMEOUT"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "CONNECTION_REFUSED"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "CONNECTION_RESET"
	}
	return "TRANSPORT"
}
