// Package paysim is the payment provider the product ships for development, tests and load: it
// behaves like Stripe PaymentIntents (idempotency keys, 3-D Secure, signed webhooks) behind
// payment.Gateway, so the saga cannot tell it from a real provider's adapter.
//
// Its state is in PostgreSQL, not in memory, so that the API process (which serves the 3-D Secure
// page and delivers webhooks) and the worker (which authorizes, captures, voids and refunds) share
// one provider, and it survives restarts. It is the simulator's own: a schema of its own (paysim),
// created by its own migrations (Migrate) and read by its own queries (simdb), which the product
// never reads, as it could never read a real provider's tables. Every status change is a
// conditional UPDATE on the status it leaves, so two racing callers have one winner.
package paysim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim/simdb"
)

// Payment method tokens the simulator understands; any other token is declined "invalid_token".
const (
	TokenOK      = "tok_ok"      // authorized at once
	Token3DS     = "tok_3ds"     // requires the shopper's 3-D Secure answer
	TokenDecline = "tok_decline" // declined "card_declined"
	// TokenTimeout authorizes, but the call answers ErrTimeout: the caller must Lookup.
	TokenTimeout = "tok_timeout"
)

// Decline codes of DECLINED intents.
const (
	DeclineCardDeclined   = "card_declined"
	DeclineInvalidToken   = "invalid_token"
	DeclineAuthentication = "authentication_failed" // the shopper declined 3-D Secure
)

// ThreeDSPath is the path prefix of the 3-D Secure page; the intent id follows it.
const ThreeDSPath = "/paysim/3ds/"

// Options configure a Sim. Zero values take the defaults named on each field.
type Options struct {
	// PublicBaseURL is how shoppers' browsers reach the API that serves Routes; redirect URLs
	// are PublicBaseURL + ThreeDSPath + intent id.
	PublicBaseURL string
	// WebhookURL receives the signed webhooks. Empty: this Sim enqueues events but does not send
	// them (a Sim with a WebhookURL, usually the API's, delivers them).
	WebhookURL    string
	WebhookSecret []byte
	// HTTPClient sends webhooks. Default: a client that does not follow redirects.
	HTTPClient *http.Client
	Log        *slog.Logger
	// HoldUntil, when set, tells the 3-D Secure page until when the shop holds the order's items
	// (nil: not held, or unknown), so the shopper sees the hold, extended or not, while paying.
	HoldUntil func(ctx context.Context, orderID int64) *time.Time

	// Latency and FailureRate are this process's fault defaults; the paysim.faults row overrides
	// them where it sets a value (see SetFaults).
	Latency     time.Duration
	FailureRate float64
	// Rand returns numbers in [0, 1) for the failure rate and the retry jitter. Default
	// math/rand/v2. Tests pass a fixed source.
	Rand func() float64

	// DeliveryTimeout bounds one webhook POST. Default 10s.
	DeliveryTimeout time.Duration
	// RetryBase is the first retry delay of a failed webhook; it doubles per attempt up to
	// RetryMax. Defaults 1s and 30s.
	RetryBase time.Duration
	RetryMax  time.Duration
	// GiveUpAfter stops retrying an event this old. Default 24h.
	GiveUpAfter time.Duration
	// PollInterval is how often RunDeliverer looks for due events when nothing wakes it.
	// Default 1s.
	PollInterval time.Duration
}

// Sim is the simulator. It is safe for concurrent use; one per process.
type Sim struct {
	pool *pgxpool.Pool
	q    *simdb.Queries
	opts Options
	log  *slog.Logger

	faults   atomic.Pointer[faultSnapshot]
	faultsMu sync.Mutex

	// wake tells RunDeliverer that this process enqueued an event.
	wake chan struct{}

	// Deliveries started by Approve/Decline, so Close can wait for them.
	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
}

var _ payment.Gateway = (*Sim)(nil)

// New returns a simulator on pool, whose database has the simulator's schema (Migrate).
func New(pool *pgxpool.Pool, opts Options) *Sim {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is not a delivery
		}}
	}
	if opts.Rand == nil {
		opts.Rand = mrand.Float64
	}
	opts.PublicBaseURL = strings.TrimRight(opts.PublicBaseURL, "/")
	setDefault(&opts.DeliveryTimeout, 10*time.Second)
	setDefault(&opts.RetryBase, time.Second)
	setDefault(&opts.RetryMax, 30*time.Second)
	setDefault(&opts.GiveUpAfter, 24*time.Hour)
	setDefault(&opts.PollInterval, time.Second)
	return &Sim{
		pool: pool, q: simdb.New(pool), opts: opts, log: opts.Log.With("component", "paysim"),
		wake: make(chan struct{}, 1),
	}
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Close waits for the webhook deliveries that Approve and Decline started. Events not yet
// delivered stay in the table for RunDeliverer.
func (s *Sim) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
}

var currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)

// Authorize implements payment.Gateway.
func (s *Sim) Authorize(ctx context.Context, req payment.AuthorizeRequest) (payment.Intent, error) {
	if err := validate(req); err != nil {
		return payment.Intent{}, err
	}
	if err := s.gate(ctx, "authorize", true); err != nil {
		return payment.Intent{}, err
	}
	id := newID("pi_")
	p := simdb.CreateIntentParams{
		ID: id, IdempotencyKey: req.IdempotencyKey, OrderID: req.OrderID, AmountMinor: req.AmountMinor,
		Currency: req.Currency, Token: req.PaymentMethodToken,
	}
	switch req.PaymentMethodToken {
	case TokenOK, TokenTimeout:
		p.Status = string(payment.StatusAuthorized)
	case Token3DS:
		p.Status = string(payment.StatusRequiresAction)
		p.RedirectUrl = s.opts.PublicBaseURL + ThreeDSPath + id
	case TokenDecline:
		p.Status, p.DeclineCode = string(payment.StatusDeclined), DeclineCardDeclined
	default:
		p.Status, p.DeclineCode = string(payment.StatusDeclined), DeclineInvalidToken
	}
	row, err := s.q.CreateIntent(ctx, p)
	if db.NotFound(err) {
		// The key is taken: answer with its intent, once we know it is the same request.
		existing, err := s.q.IntentByKey(ctx, req.IdempotencyKey)
		if err != nil {
			return payment.Intent{}, s.dbErr(ctx, "authorize", err, false)
		}
		if existing.OrderID != req.OrderID || existing.AmountMinor != req.AmountMinor ||
			existing.Currency != req.Currency || existing.Token != req.PaymentMethodToken {
			return payment.Intent{}, fmt.Errorf("paysim: authorize %q: %w", req.IdempotencyKey, payment.ErrKeyReused)
		}
		return toIntent(existing), nil
	}
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, "authorize", err, true)
	}
	if req.PaymentMethodToken == TokenTimeout {
		// The provider did authorize; the caller just never hears about it.
		return payment.Intent{}, fmt.Errorf("paysim: authorize %q: %w", req.IdempotencyKey, payment.ErrTimeout)
	}
	return toIntent(row), nil
}

func validate(req payment.AuthorizeRequest) error {
	switch {
	case req.IdempotencyKey == "" || len(req.IdempotencyKey) > 255:
		return fmt.Errorf("paysim: %w: idempotency key must be 1..255 characters", payment.ErrInvalidRequest)
	case req.AmountMinor <= 0:
		return fmt.Errorf("paysim: %w: amount must be positive", payment.ErrInvalidRequest)
	case !currencyRe.MatchString(req.Currency):
		return fmt.Errorf("paysim: %w: currency must be three capital letters", payment.ErrInvalidRequest)
	}
	return nil
}

// Capture implements payment.Gateway.
func (s *Sim) Capture(ctx context.Context, key string) (payment.Intent, error) {
	return s.transition(ctx, "capture", key, s.q.Capture, payment.StatusCaptured)
}

// Void implements payment.Gateway.
func (s *Sim) Void(ctx context.Context, key string) (payment.Intent, error) {
	return s.transition(ctx, "void", key, s.q.Void, payment.StatusVoided, payment.StatusDeclined)
}

// Refund implements payment.Gateway.
func (s *Sim) Refund(ctx context.Context, key string) (payment.Intent, error) {
	return s.transition(ctx, "refund", key, s.q.Refund, payment.StatusRefunded)
}

// RefundPart implements payment.Gateway. The refund row and the intent's refunded amount are
// written in one transaction: a second call with the same refund key waits for the first and
// then finds its refund, so money moves once.
func (s *Sim) RefundPart(ctx context.Context, key string, refund payment.PartialRefund) (payment.Intent, error) {
	switch {
	case refund.IdempotencyKey == "" || len(refund.IdempotencyKey) > 255:
		return payment.Intent{}, fmt.Errorf("paysim: %w: refund key must be 1..255 characters", payment.ErrInvalidRequest)
	case refund.AmountMinor <= 0:
		return payment.Intent{}, fmt.Errorf("paysim: %w: refund amount must be positive", payment.ErrInvalidRequest)
	}
	if err := s.gate(ctx, "refund part", true); err != nil {
		return payment.Intent{}, err
	}
	var out payment.Intent
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := simdb.New(tx)
		_, err := q.InsertRefund(ctx, refund.IdempotencyKey, refund.AmountMinor, key)
		if db.NotFound(err) {
			return s.refundRepeat(ctx, q, key, refund, &out)
		}
		if err != nil {
			return err
		}
		row, err := q.RefundPart(ctx, refund.AmountMinor, key)
		if db.NotFound(err) {
			intent, err := q.IntentByKey(ctx, key)
			if err != nil {
				return err
			}
			if intent.Status != string(payment.StatusCaptured) {
				return fmt.Errorf("paysim: refund part %q: intent is %s: %w", key, intent.Status, payment.ErrInvalidState)
			}
			return fmt.Errorf("paysim: %w: refund of %d exceeds the %d left of the capture", payment.ErrInvalidRequest,
				refund.AmountMinor, intent.CapturedMinor-intent.RefundedMinor)
		}
		if err != nil {
			return err
		}
		out = toIntent(row)
		return nil
	})
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, payment.ErrInvalidState), errors.Is(err, payment.ErrInvalidRequest),
		errors.Is(err, payment.ErrKeyReused), errors.Is(err, payment.ErrNotFound):
		return payment.Intent{}, err
	}
	return payment.Intent{}, s.dbErr(ctx, "refund part", err, true)
}

// refundRepeat answers a refund key already taken: the same refund gets the intent as it stands;
// another amount or intent under the key is refused. No refund row and no intent: ErrNotFound.
func (s *Sim) refundRepeat(ctx context.Context, q *simdb.Queries, key string, refund payment.PartialRefund,
	out *payment.Intent) error {
	prior, err := q.RefundByKey(ctx, refund.IdempotencyKey)
	if db.NotFound(err) {
		return fmt.Errorf("paysim: refund part %q: %w", key, payment.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if prior.IntentKey != key || prior.AmountMinor != refund.AmountMinor {
		return fmt.Errorf("paysim: refund %q: %w", refund.IdempotencyKey, payment.ErrKeyReused)
	}
	row, err := q.IntentByKey(ctx, key)
	if err != nil {
		return err
	}
	*out = toIntent(row)
	return nil
}

// transition runs one conditional UPDATE. When it matches no row, a fresh read says why: no
// intent (ErrNotFound), an intent already where the call leads (done, answered unchanged), or
// anything else (ErrInvalidState).
func (s *Sim) transition(ctx context.Context, op, key string,
	update func(context.Context, string) (simdb.PaysimIntent, error), done ...payment.Status) (payment.Intent, error) {
	if err := s.gate(ctx, op, true); err != nil {
		return payment.Intent{}, err
	}
	row, err := update(ctx, key)
	if err == nil {
		return toIntent(row), nil
	}
	if !db.NotFound(err) {
		return payment.Intent{}, s.dbErr(ctx, op, err, true)
	}
	row, err = s.q.IntentByKey(ctx, key)
	if db.NotFound(err) {
		return payment.Intent{}, fmt.Errorf("paysim: %s %q: %w", op, key, payment.ErrNotFound)
	}
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, false)
	}
	for _, st := range done {
		if payment.Status(row.Status) == st {
			return toIntent(row), nil
		}
	}
	return payment.Intent{}, fmt.Errorf("paysim: %s %q: intent is %s: %w", op, key, row.Status, payment.ErrInvalidState)
}

// Lookup implements payment.Gateway.
func (s *Sim) Lookup(ctx context.Context, key string) (payment.Intent, error) {
	if err := s.gate(ctx, "lookup", false); err != nil {
		return payment.Intent{}, err
	}
	row, err := s.q.IntentByKey(ctx, key)
	if db.NotFound(err) {
		return payment.Intent{}, fmt.Errorf("paysim: lookup %q: %w", key, payment.ErrNotFound)
	}
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, "lookup", err, false)
	}
	return toIntent(row), nil
}

// dbErr turns a database failure into the provider error a caller of a real provider would see:
// a write whose context ended may have committed, so its outcome is unknown (ErrTimeout);
// anything else changed nothing (ErrUnavailable).
func (s *Sim) dbErr(ctx context.Context, op string, err error, wrote bool) error {
	if wrote && ctx.Err() != nil {
		return fmt.Errorf("paysim: %s: %w: %w", op, payment.ErrTimeout, err)
	}
	return fmt.Errorf("paysim: %s: %w: %w", op, payment.ErrUnavailable, err)
}

func toIntent(r simdb.PaysimIntent) payment.Intent {
	return payment.Intent{
		ID: r.ID, IdempotencyKey: r.IdempotencyKey, OrderID: r.OrderID, Status: payment.Status(r.Status),
		AmountMinor: r.AmountMinor, CapturedMinor: r.CapturedMinor, RefundedMinor: r.RefundedMinor,
		Currency: r.Currency, RedirectURL: r.RedirectUrl, DeclineCode: r.DeclineCode,
	}
}

// newID returns prefix and 96 random bits in hex. Intent ids are unguessable because the 3-D
// Secure URL carries one.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b[:])
}
