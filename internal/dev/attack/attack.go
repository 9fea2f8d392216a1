// Package attack is the checkout's own black-box attack suite: what an attacker on the network
// would try against a running stack — forged tokens, other people's orders, forged webhooks,
// oversized and odd requests, spoofed client addresses, coupon and open-order abuse, the codec
// endpoint, metrics, and the control plane (Temporal's frontend and UI, the workers) — each tried
// from outside, through the stack's own listeners, and judged PASS (refused as the product's
// error model says), FAIL, or SKIP (with the reason: the target has nothing to attack there yet).
//
// `make attack` runs it against `make run` or `make cluster` (bench/attack); a short form runs in
// `make test` against the end-to-end test stack. It only ever reaches this machine: every address
// of a target must be loopback.
package attack

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/loadgen"
)

// Kind is what an attack goes at.
type Kind string

// The kinds of target. The control plane's (Temporal's frontend and UI, the workers through
// Temporal) are attacked only where the target's Temporal authenticates its callers: on a stack
// that has none (make run, which may stay open on loopback), there is nothing to refuse.
const (
	KindAPI        Kind = "api"
	KindWebhook    Kind = "webhook"
	KindCodec      Kind = "codec"
	KindMetrics    Kind = "metrics"
	KindTemporal   Kind = "temporal"
	KindTemporalUI Kind = "temporal-ui"
	KindWorker     Kind = "worker"
)

// Attack is one row of the suite: a name, what it goes at, what it tries, and its run.
type Attack struct {
	Name string
	Kind Kind
	// What says what is tried and what must happen.
	What string
	// Long attacks are left out of the short form (make test).
	Long bool
	Run  func(ctx context.Context, r *Run) Outcome
}

// Verdict is an attack's result.
type Verdict string

// The verdicts.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	Skip Verdict = "SKIP"
)

// Outcome is what an attack found.
type Outcome struct {
	Verdict Verdict
	Detail  string
}

func pass(format string, a ...any) Outcome { return Outcome{Pass, fmt.Sprintf(format, a...)} }
func fail(format string, a ...any) Outcome { return Outcome{Fail, fmt.Sprintf(format, a...)} }
func skip(format string, a ...any) Outcome { return Outcome{Skip, fmt.Sprintf(format, a...)} }

// failed is an outcome for an error that kept the attack from being judged: a failure, never a
// pass.
func failed(what string, err error) Outcome { return fail("%s: %v", what, err) }

// Target is a running stack, as the attacks reach it.
type Target struct {
	// Name says which stack it is ("make run", "make cluster", "test stack").
	Name string
	// Base is the API as clients reach it (through the load balancer, if any).
	Base string
	// MetricsURL is an API process's /metrics on its internal listener (empty: not known; the
	// attacks that read it then judge by the answers alone).
	MetricsURL string
	// TemporalAddress is Temporal's frontend, TemporalUI its Web UI, Namespace the product's.
	TemporalAddress, TemporalUI, Namespace string
	// Keys are how the target's tokens are signed: the attacks mint the tokens of the people they
	// play (two shoppers, sellers 42 and 43, support, ops) with them, and forge others.
	Keys auth.Keys
	// WebhookSecret signs the payment provider's webhooks.
	WebhookSecret string
	// TemporalAuth says the target's Temporal frontend and UI require callers to authenticate
	// (mTLS and an authorizer, staff sign-in): the control plane's attacks run only then.
	TemporalAuth bool
	// PlaintextRefused says the target's workers refuse payloads that no trusted client encoded.
	PlaintextRefused bool
	// PersonToken, when set, is how the target's staff get their tokens: signed in at the
	// identity provider as the person of the role (support, ops; shopper: a person who signs in
	// there without a staff role). Unset, staff tokens are minted with Keys, as in dev.
	PersonToken func(ctx context.Context, role string) (string, error)
	// StaffIssuer and StaffAudience are the identity provider's, where staff come from it alone.
	StaffIssuer, StaffAudience string
	// Tokens, when set, is where the shoppers' and sellers' tokens come from: the identity
	// provider of a target that takes no token of the shared secret (every stack but dev).
	// Unset, they are minted with Keys.
	Tokens loadgen.Tokens
	// TemporalOptions are how a trusted client of the target connects to its frontend (its
	// certificate and credentials, where the frontend requires them): the plaintext-signal attack
	// connects so, to show that being let in is not enough to be obeyed.
	TemporalOptions client.Options
}

// Check refuses a target with an address off this machine: the suite attacks this machine's
// stacks only.
func (t Target) Check() error {
	for _, u := range []string{t.Base, t.MetricsURL, t.TemporalUI} {
		if u == "" {
			continue
		}
		if err := loadgen.CheckLoopback(u); err != nil {
			return fmt.Errorf("attack: %w", err)
		}
	}
	if t.TemporalAddress != "" {
		host, _, err := net.SplitHostPort(t.TemporalAddress)
		ip := net.ParseIP(host)
		if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return fmt.Errorf("attack: refusing Temporal at %q: only a stack on this machine is attacked", t.TemporalAddress)
		}
	}
	if t.Base == "" || len(t.Keys.Signing.Secret) == 0 || t.WebhookSecret == "" {
		return fmt.Errorf("attack: the target needs its API address, its token key and its webhook secret")
	}
	return nil
}

// Options say which attacks run and where their lines go.
type Options struct {
	// Short runs the short form: every attack but the long ones.
	Short bool
	// Only, when set, names the attacks to run.
	Only []string
	// Out receives one line per attack (nil: none).
	Out io.Writer
}

// Result is one attack's verdict.
type Result struct {
	Name    string
	Kind    Kind
	Outcome Outcome
	Took    time.Duration
}

// Report is a run's results, in the order of the suite.
type Report struct {
	Results []Result
}

// Count is how many results have the verdict.
func (rep Report) Count(v Verdict) int {
	n := 0
	for _, r := range rep.Results {
		if r.Outcome.Verdict == v {
			n++
		}
	}
	return n
}

// Failed: any attack failed.
func (rep Report) Failed() bool { return rep.Count(Fail) > 0 }

// Run is one run of the suite against a target: the people it plays and what it made.
type Run struct {
	T    Target
	http *http.Client
	// id names what this run makes (users, keys, coupons); users counts from base.
	id   string
	base int64

	setup  sync.Once
	fix    fixtures
	fixErr error
	// people are the staff tokens got from the identity provider, by role.
	people map[string]string
	// cleanup runs after the last attack: orders to cancel, campaigns to end.
	mu      sync.Mutex
	cleanup []func(context.Context)
}

// Execute runs the attacks of the suite the options choose, one after another (some count a
// limit that another would disturb), printing a line for each.
func Execute(ctx context.Context, t Target, o Options) (Report, error) {
	if err := t.Check(); err != nil {
		return Report{}, err
	}
	if t.Namespace == "" {
		t.Namespace = "default"
	}
	r := &Run{T: t, id: fmt.Sprintf("%06x", rand.IntN(1<<24)), base: 2_000_000_000 + rand.Int64N(1_000_000_000)*10,
		http: &http.Client{Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	defer r.finish()
	var rep Report
	width := 0
	for _, a := range Suite {
		width = max(width, len(a.Name))
	}
	for _, a := range Suite {
		if len(o.Only) > 0 && !slices.Contains(o.Only, a.Name) || len(o.Only) == 0 && o.Short && a.Long {
			continue
		}
		began := time.Now()
		out := r.attempt(ctx, a)
		res := Result{Name: a.Name, Kind: a.Kind, Outcome: out, Took: time.Since(began)}
		rep.Results = append(rep.Results, res)
		if o.Out != nil {
			fmt.Fprintf(o.Out, "%-4s  %-*s  %-11s  %s\n", out.Verdict, width, a.Name, a.Kind, out.Detail)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	if o.Out != nil {
		fmt.Fprintf(o.Out, "\n%d attacks on %s: %d passed, %d failed, %d skipped\n", len(rep.Results), t.Name,
			rep.Count(Pass), rep.Count(Fail), rep.Count(Skip))
	}
	return rep, nil
}

// attempt runs one attack within a minute, skipping the control plane's where the target's
// Temporal has nothing to refuse.
func (r *Run) attempt(ctx context.Context, a Attack) (out Outcome) {
	switch {
	case (a.Kind == KindTemporal || a.Kind == KindTemporalUI) && !r.T.TemporalAuth:
		return skip("%s's Temporal frontend and UI authenticate nobody (make run stays open on loopback; a cluster until it runs mTLS and staff sign-in): nothing to refuse yet", r.T.Name)
	case a.Kind == KindWorker && !r.T.PlaintextRefused:
		return skip("%s's workers take payloads no trusted client encoded (dev allows it; a cluster until its codec refuses plaintext): nothing to refuse yet", r.T.Name)
	}
	defer func() {
		if p := recover(); p != nil {
			out = fail("the attack itself failed: %v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return a.Run(ctx, r)
}

// finish undoes what the run left waiting (orders placed, campaigns started).
func (r *Run) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.mu.Lock()
	undo := r.cleanup
	r.cleanup = nil
	r.mu.Unlock()
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i](ctx)
	}
}

func (r *Run) later(f func(context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanup = append(r.cleanup, f)
}

// user is the run's n-th user id: fresh for every run, so that a long-lived stack's data never
// decides an attack.
func (r *Run) user(n int64) int64 { return r.base + n }

// mint is a token of the target's for p, valid an hour.
func (r *Run) mint(p auth.Principal) string {
	tok, err := r.T.Keys.Mint(p, time.Hour)
	if err != nil {
		panic(fmt.Sprintf("minting a %s token: %v", p.Role, err))
	}
	return tok
}

func (r *Run) shopper(n int64) string {
	if r.T.Tokens != nil {
		return r.provided(func(ctx context.Context) (string, error) { return r.T.Tokens.Shopper(ctx, r.user(n)) })
	}
	return r.mint(auth.Principal{UserID: r.user(n), Role: auth.RoleShopper})
}

func (r *Run) seller(id int64) string {
	if r.T.Tokens != nil {
		return r.provided(func(ctx context.Context) (string, error) { return r.T.Tokens.Seller(ctx, id) })
	}
	return r.mint(auth.Principal{UserID: 1000 + id, Role: auth.RoleSeller, SellerID: id})
}

// provided is a token got from the target's identity provider.
func (r *Run) provided(get func(context.Context) (string, error)) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := get(ctx)
	if err != nil {
		panic(fmt.Sprintf("a token from the identity provider: %v", err))
	}
	return tok
}

func (r *Run) support() string { return r.staff(auth.RoleSupport, 900) }

func (r *Run) ops() string { return r.staff(auth.RoleOps, 901) }

// staff is a token of the role's person: from the identity provider where the target has one,
// else minted.
func (r *Run) staff(role string, n int64) string {
	if r.T.PersonToken == nil {
		return r.mint(auth.Principal{UserID: r.user(n), Role: role})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if tok, ok := r.people[role]; ok {
		return tok
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := r.T.PersonToken(ctx, role)
	if err != nil {
		panic(fmt.Sprintf("signing in as %s at the identity provider: %v", role, err))
	}
	if r.people == nil {
		r.people = map[string]string{}
	}
	r.people[role] = tok
	return tok
}

// hostOf is the host:port of a URL.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// short is s cut to n characters, for a line of the report.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
