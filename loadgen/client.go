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

// client sends the generator's requests; with a recorder, it records each one.
type client struct {
	base string
	http *http.Client
	rec  *recorder
}

// answer is an HTTP answer: status, the error code of an error body, the body, and Retry-After
// (in whole seconds, as the API sends it; 0 when absent).
type answer struct {
	status     int
	code       string
	body       []byte
	retryAfter time.Duration
}

func (a answer) decode(v any) error { return json.Unmarshal(a.body, v) }

type request struct {
	endpoint string
	method   string
	url      string // absolute, or a path under base
	token    string
	header   http.Header
	json     any
	form     url.Values
}

// send runs one request. A transport failure is an error (and recorded as status 0).
func (c *client) send(ctx context.Context, r request) (answer, error) {
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
			return answer{}, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return answer{}, err
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
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.observe(r.endpoint, 0, transportCode(err), time.Since(start))
		return answer{}, fmt.Errorf("%s: %w", r.endpoint, err)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	elapsed := time.Since(start)
	if err != nil {
		c.observe(r.endpoint, 0, transportCode(err), elapsed)
		return answer{}, fmt.Errorf("%s: %w", r.endpoint, err)
	}
	a := answer{status: resp.StatusCode, body: raw}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		a.retryAfter = time.Duration(secs) * time.Second
	}
	if a.status >= 400 {
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(raw, &e) == nil {
			a.code = e.Code
		}
	}
	c.observe(r.endpoint, a.status, a.code, elapsed)
	return a, nil
}

func (c *client) observe(endpoint string, status int, code string, d time.Duration) {
	if c.rec != nil {
		c.rec.observe(endpoint, status, code, d)
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
