package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// answer is an HTTP answer as the attacks judge it.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) str(path ...string) string {
	v := a.at(path...)
	switch s := v.(type) {
	case string:
		return s
	case float64:
		return strconv.FormatFloat(s, 'f', -1, 64)
	}
	return ""
}

func (a answer) num(path ...string) int64 {
	if f, ok := a.at(path...).(float64); ok {
		return int64(f)
	}
	return 0
}

func (a answer) at(path ...string) any {
	var v any = a.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func (a answer) String() string {
	return fmt.Sprintf("%d %s", a.status, short(a.raw, 160))
}

// request is one HTTP request of an attack.
type request struct {
	method, path, token string
	// body is sent as is when a string or []byte, as JSON otherwise (nil: none).
	body    any
	headers []string // name, value pairs
	// base, when set, is sent to instead of the target's API.
	base string
}

// do sends the request and reads the answer.
func (r *Run) do(ctx context.Context, q request) (answer, error) {
	var body io.Reader
	switch b := q.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return answer{}, err
		}
		body = bytes.NewReader(raw)
	}
	base := q.base
	if base == "" {
		base = r.T.Base
	}
	req, err := http.NewRequestWithContext(ctx, q.method, strings.TrimRight(base, "/")+q.path, body)
	if err != nil {
		return answer{}, err
	}
	if q.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if q.token != "" {
		req.Header.Set("Authorization", "Bearer "+q.token)
	}
	for i := 0; i+1 < len(q.headers); i += 2 {
		req.Header.Set(q.headers[i], q.headers[i+1])
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a, nil
}

// call is do of a request to the API.
func (r *Run) call(ctx context.Context, method, path, token string, body any, headers ...string) (answer, error) {
	return r.do(ctx, request{method: method, path: path, token: token, body: body, headers: headers})
}

// refusal says how a refusal differs from the product's error model for it: the status, the
// code, a message, and Retry-After (whole seconds) on a 429 or 503. Empty: it is that refusal.
func refusal(a answer, status int, code string) string {
	switch {
	case a.status != status:
		return fmt.Sprintf("want %d %s, got %s", status, code, a)
	case a.str("code") != code:
		return fmt.Sprintf("want code %s, got %s", code, a)
	case a.str("message") == "":
		return fmt.Sprintf("no message: %s", a)
	}
	return retryAfterMissing(a)
}

// retryAfterMissing: a 429 or 503 must say when to come back.
func retryAfterMissing(a answer) string {
	if a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable {
		return ""
	}
	if n, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || n < 1 {
		return fmt.Sprintf("%d without a Retry-After in seconds: %q", a.status, a.header.Get("Retry-After"))
	}
	return ""
}

// refused judges an answer that must be the refusal status code.
func refused(a answer, err error, status int, code string) Outcome {
	if err != nil {
		return failed("request", err)
	}
	if why := refusal(a, status, code); why != "" {
		return fail("%s", why)
	}
	return pass("%d %s", status, code)
}

// anyRefusal judges an answer that must be one of the refusals given (status and code), in the
// error model.
func anyRefusal(a answer, err error, allowed ...refusalOf) Outcome {
	if err != nil {
		return failed("request", err)
	}
	var want []string
	for _, r := range allowed {
		if refusal(a, r.status, r.code) == "" {
			return pass("%d %s", r.status, r.code)
		}
		want = append(want, fmt.Sprintf("%d %s", r.status, r.code))
	}
	if why := retryAfterMissing(a); why != "" {
		return fail("%s", why)
	}
	return fail("want %s, got %s", strings.Join(want, " or "), a)
}

type refusalOf struct {
	status int
	code   string
}

// signatureRefused: a webhook with a bad signature is 401 INVALID_SIGNATURE, or 429 once the
// sender's bad signatures are over their limit.
var signatureRefused = []refusalOf{{http.StatusUnauthorized, "INVALID_SIGNATURE"}, {http.StatusTooManyRequests, "RATE_LIMITED"}}

// requestIDRe is a request id the API makes or adopts.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
