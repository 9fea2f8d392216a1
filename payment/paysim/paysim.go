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
	// TokenLostCreate authorizes, but the answer of the intent's creation is lost before the
	// caller learns its id: the caller can only find it by the (lagging) search, or by
	// authorizing again under the same keys.
	TokenLostCreate = "tok_lost_create"
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

	// The provider's rules (payment.Rules), Stripe's by default: idempotency keys are kept for
	// KeyWindow (24h); a search by metadata misses intents younger than SearchLag (0: none; Stripe
	// says up to a minute); an authorization lapses AuthorizationWindow after it is made (7 days).
	KeyWindow           time.Duration
	SearchLag           time.Duration
	AuthorizationWindow time.Duration
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
	setDefault(&opts.KeyWindow, 24*time.Hour)
	setDefault(&opts.AuthorizationWindow, 7*24*time.Hour)
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

// Rules implements payment.Gateway.
func (s *Sim) Rules() payment.Rules {
	return payment.Rules{KeyWindow: s.opts.KeyWindow, SearchLag: s.opts.SearchLag,
		AuthorizationWindow: s.opts.AuthorizationWindow}
}

// Authorize implements payment.Gateway as Stripe's API is used: the intent is made (key
// OpCreate), its id handed to req.Created, and then it is confirmed with the token (key
// OpConfirm). Each step under its own key answers a repeat with the intent as it stands.
func (s *Sim) Authorize(ctx context.Context, req payment.AuthorizeRequest) (payment.Intent, error) {
	if err := validate(req); err != nil {
		return payment.Intent{}, err
	}
	if err := s.gate(ctx, "authorize", true); err != nil {
		return payment.Intent{}, err
	}
	created, err := s.create(ctx, req)
	if err != nil {
		return payment.Intent{}, err
	}
	confirmed, err := s.q.KeyOf(ctx, req.OpKey(payment.OpConfirm))
	firstConfirm := db.NotFound(err) || (err == nil && time.Since(confirmed.CreatedAt) >= s.opts.KeyWindow)
	if req.PaymentMethodToken == TokenLostCreate && firstConfirm {
		// The provider made the intent and goes on; the caller never hears of it.
		if _, err := s.confirm(ctx, req, created.ID); err != nil {
			return payment.Intent{}, err
		}
		return payment.Intent{}, fmt.Errorf("paysim: authorize %q: %w", req.Key, payment.ErrTimeout)
	}
	if req.Created != nil {
		if err := req.Created(ctx, created.ID); err != nil {
			return payment.Intent{}, err
		}
	}
	intent, err := s.confirm(ctx, req, created.ID)
	if err != nil {
		return payment.Intent{}, err
	}
	if req.PaymentMethodToken == TokenTimeout && firstConfirm {
		// The provider did authorize; the caller just never hears about it (the first time).
		return payment.Intent{}, fmt.Errorf("paysim: authorize %q: %w", req.Key, payment.ErrTimeout)
	}
	return intent, nil
}

// create makes the intent under the create key, or answers the one a live key names.
func (s *Sim) create(ctx context.Context, req payment.AuthorizeRequest) (payment.Intent, error) {
	key := req.OpKey(payment.OpCreate)
	hash := fmt.Sprintf("order=%d amount=%d currency=%s token=%s", req.OrderID, req.AmountMinor, req.Currency,
		req.PaymentMethodToken)
	var out payment.Intent
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := simdb.New(tx)
		row, err := q.CreateIntent(ctx, simdb.CreateIntentParams{ID: newID("pi_"), IdempotencyKey: req.Key,
			OrderID: req.OrderID, OrderVersion: req.OrderVersion, AmountMinor: req.AmountMinor, Currency: req.Currency,
			Token: req.PaymentMethodToken})
		if err != nil {
			return err
		}
		fresh, err := s.takeKey(ctx, q, key, payment.OpCreate, hash, row.ID)
		if err != nil || !fresh {
			return err
		}
		out = s.toIntent(row)
		return nil
	})
	switch {
	case errors.Is(err, errRepeat):
		return s.repeat(ctx, key, payment.OpCreate, hash)
	case errors.Is(err, payment.ErrKeyReused):
		return payment.Intent{}, err
	case err != nil:
		return payment.Intent{}, s.dbErr(ctx, "authorize", err, true)
	}
	return out, nil
}

// confirm confirms a CREATED intent with the token under the confirm key; a repeat answers the
// intent as it stands.
func (s *Sim) confirm(ctx context.Context, req payment.AuthorizeRequest, intentID string) (payment.Intent, error) {
	key := req.OpKey(payment.OpConfirm)
	hash := "intent=" + intentID + " token=" + req.PaymentMethodToken
	p := simdb.ConfirmParams{ID: intentID}
	switch req.PaymentMethodToken {
	case TokenOK, TokenTimeout, TokenLostCreate:
		p.Status = string(payment.StatusAuthorized)
		until := time.Now().Add(s.opts.AuthorizationWindow)
		p.CaptureBefore = &until
	case Token3DS:
		p.Status = string(payment.StatusRequiresAction)
		p.RedirectUrl = s.opts.PublicBaseURL + ThreeDSPath + intentID
	case TokenDecline:
		p.Status, p.DeclineCode = string(payment.StatusDeclined), DeclineCardDeclined
	default:
		p.Status, p.DeclineCode = string(payment.StatusDeclined), DeclineInvalidToken
	}
	return s.operate(ctx, "confirm", key, payment.OpConfirm, hash, intentID, func(q *simdb.Queries) (simdb.PaysimIntent, error) {
		return q.Confirm(ctx, p)
	})
}

// errRepeat: the key is live with the same parameters; the request is answered as a repeat.
var errRepeat = errors.New("paysim: repeat of a live idempotency key")

// takeKey records key for the operation; false with errRepeat when the key is live with the same
// parameters, ErrKeyReused when it is live with others.
func (s *Sim) takeKey(ctx context.Context, q *simdb.Queries, key, op, hash, intentID string) (bool, error) {
	_, err := q.TakeKey(ctx, simdb.TakeKeyParams{Key: key, Operation: op, RequestHash: hash, IntentID: intentID,
		WindowSeconds: s.opts.KeyWindow.Seconds()})
	if err == nil {
		return true, nil
	}
	if !db.NotFound(err) {
		return false, err
	}
	prior, err := q.KeyOf(ctx, key)
	if err != nil {
		return false, err
	}
	if prior.Operation != op || prior.RequestHash != hash {
		return false, fmt.Errorf("paysim: %s %q: %w", op, key, payment.ErrKeyReused)
	}
	return false, errRepeat
}

// repeat answers a request under a live key: the intent the key names, as it stands now.
func (s *Sim) repeat(ctx context.Context, key, op, hash string) (payment.Intent, error) {
	prior, err := s.q.KeyOf(ctx, key)
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, false)
	}
	if prior.Operation != op || prior.RequestHash != hash {
		return payment.Intent{}, fmt.Errorf("paysim: %s %q: %w", op, key, payment.ErrKeyReused)
	}
	row, err := s.q.IntentByID(ctx, prior.IntentID)
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, false)
	}
	return s.toIntent(row), nil
}

// operate runs one state change of an intent under an idempotency key, in one transaction with
// the key: a live key with the same parameters answers the intent as it stands; with others,
// ErrKeyReused. When the conditional UPDATE matches no row, nothing is kept of the key and a fresh
// read says why: no intent (ErrNotFound), or the intent is in another state (errWrongState).
func (s *Sim) operate(ctx context.Context, op, key, opName, hash, intentID string,
	update func(*simdb.Queries) (simdb.PaysimIntent, error)) (payment.Intent, error) {
	var out payment.Intent
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := simdb.New(tx)
		fresh, err := s.takeKey(ctx, q, key, opName, hash, intentID)
		if err != nil || !fresh {
			return err
		}
		row, err := update(q)
		if db.NotFound(err) {
			return errWrongState
		}
		if err != nil {
			return err
		}
		out = s.toIntent(row)
		return nil
	})
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, errRepeat):
		return s.repeat(ctx, key, opName, hash)
	case errors.Is(err, errWrongState):
		row, rerr := s.q.IntentByID(ctx, intentID)
		if db.NotFound(rerr) {
			return payment.Intent{}, fmt.Errorf("paysim: %s %s: %w", op, intentID, payment.ErrNotFound)
		}
		if rerr != nil {
			return payment.Intent{}, s.dbErr(ctx, op, rerr, false)
		}
		return s.toIntent(row), errWrongState
	case errors.Is(err, payment.ErrKeyReused):
		return payment.Intent{}, err
	}
	return payment.Intent{}, s.dbErr(ctx, op, err, true)
}

// errWrongState: the intent is not in a state the operation leaves.
var errWrongState = errors.New("paysim: intent in another state")

var currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)

func validate(req payment.AuthorizeRequest) error {
	switch {
	case req.Key == "" || len(req.Key) > 200:
		return fmt.Errorf("paysim: %w: payment key must be 1..200 characters", payment.ErrInvalidRequest)
	case req.AmountMinor <= 0:
		return fmt.Errorf("paysim: %w: amount must be positive", payment.ErrInvalidRequest)
	case !currencyRe.MatchString(req.Currency):
		return fmt.Errorf("paysim: %w: currency must be three capital letters", payment.ErrInvalidRequest)
	}
	return nil
}

// Capture implements payment.Gateway.
func (s *Sim) Capture(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return s.transition(ctx, "capture", ref, payment.OpCapture, s.q.Capture, payment.StatusCaptured)
}

// Void implements payment.Gateway.
func (s *Sim) Void(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return s.transition(ctx, "void", ref, payment.OpVoid, s.q.Void, payment.StatusVoided, payment.StatusDeclined)
}

// Refund implements payment.Gateway.
func (s *Sim) Refund(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return s.transition(ctx, "refund", ref, payment.OpRefund, s.q.Refund, payment.StatusRefunded)
}

// RefundPart implements payment.Gateway. The refund row and the intent's refunded amount are
// written in one transaction: a second call with the same refund key waits for the first and
// then finds its refund, so money moves once. The refund row carries its key for good (a real
// provider's refund metadata), so a repeat after the key window still finds it.
func (s *Sim) RefundPart(ctx context.Context, ref payment.Ref, refund payment.PartialRefund) (payment.Intent, error) {
	switch {
	case refund.IdempotencyKey == "" || len(refund.IdempotencyKey) > 255:
		return payment.Intent{}, fmt.Errorf("paysim: %w: refund key must be 1..255 characters", payment.ErrInvalidRequest)
	case refund.AmountMinor <= 0:
		return payment.Intent{}, fmt.Errorf("paysim: %w: refund amount must be positive", payment.ErrInvalidRequest)
	}
	if err := s.gate(ctx, "refund part", true); err != nil {
		return payment.Intent{}, err
	}
	cur, err := s.resolve(ctx, "refund part", ref)
	if err != nil {
		return payment.Intent{}, err
	}
	var out payment.Intent
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := simdb.New(tx)
		_, err := q.InsertRefund(ctx, refund.IdempotencyKey, cur.ID, refund.AmountMinor)
		if db.NotFound(err) {
			return s.refundRepeat(ctx, q, cur.ID, refund, &out)
		}
		if err != nil {
			return err
		}
		row, err := q.RefundPart(ctx, refund.AmountMinor, cur.ID)
		if db.NotFound(err) {
			intent, err := q.IntentByID(ctx, cur.ID)
			if err != nil {
				return err
			}
			if intent.Status != string(payment.StatusCaptured) {
				return fmt.Errorf("paysim: refund part %s: intent is %s: %w", cur.ID, intent.Status, payment.ErrInvalidState)
			}
			return fmt.Errorf("paysim: %w: refund of %d exceeds the %d left of the capture", payment.ErrInvalidRequest,
				refund.AmountMinor, intent.CapturedMinor-intent.RefundedMinor)
		}
		if err != nil {
			return err
		}
		out = s.toIntent(row)
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
// another amount or intent under the key is refused.
func (s *Sim) refundRepeat(ctx context.Context, q *simdb.Queries, intentID string, refund payment.PartialRefund,
	out *payment.Intent) error {
	prior, err := q.RefundByKey(ctx, refund.IdempotencyKey)
	if db.NotFound(err) {
		return fmt.Errorf("paysim: refund part %s: %w", intentID, payment.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if prior.IntentID != intentID || prior.AmountMinor != refund.AmountMinor {
		return fmt.Errorf("paysim: refund %q: %w", refund.IdempotencyKey, payment.ErrKeyReused)
	}
	row, err := q.IntentByID(ctx, intentID)
	if err != nil {
		return err
	}
	*out = s.toIntent(row)
	return nil
}

// transition runs one state change under the operation's key. An intent already where the call
// leads is answered unchanged; any other state is ErrInvalidState.
func (s *Sim) transition(ctx context.Context, op string, ref payment.Ref, opName string,
	update func(context.Context, string) (simdb.PaysimIntent, error), done ...payment.Status) (payment.Intent, error) {
	if err := s.gate(ctx, op, true); err != nil {
		return payment.Intent{}, err
	}
	cur, err := s.resolve(ctx, op, ref)
	if err != nil {
		return payment.Intent{}, err
	}
	intent, err := s.operate(ctx, op, ref.OpKey(opName), opName, opName+" intent="+cur.ID, cur.ID,
		func(q *simdb.Queries) (simdb.PaysimIntent, error) { return update(ctx, cur.ID) })
	if err != nil && !errors.Is(err, errWrongState) {
		return intent, err
	}
	// Done now, or before (a repeat answers the intent as it stands: only where the call leads).
	for _, st := range done {
		if intent.Status == st {
			return intent, nil
		}
	}
	return payment.Intent{}, fmt.Errorf("paysim: %s %s: intent is %s: %w", op, cur.ID, intent.Status, payment.ErrInvalidState)
}

// Lookup implements payment.Gateway: by id, or by a search of the metadata that lags SearchLag.
func (s *Sim) Lookup(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	if err := s.gate(ctx, "lookup", false); err != nil {
		return payment.Intent{}, err
	}
	return s.resolve(ctx, "lookup", ref)
}

// resolve reads the intent ref names: by id, else by the lagging search.
func (s *Sim) resolve(ctx context.Context, op string, ref payment.Ref) (payment.Intent, error) {
	var (
		row simdb.PaysimIntent
		err error
	)
	if ref.IntentID != "" {
		row, err = s.q.IntentByID(ctx, ref.IntentID)
	} else {
		row, err = s.q.SearchIntent(ctx, ref.Key, s.opts.SearchLag.Seconds())
	}
	if db.NotFound(err) {
		return payment.Intent{}, fmt.Errorf("paysim: %s %q %q: %w", op, ref.Key, ref.IntentID, payment.ErrNotFound)
	}
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, false)
	}
	return s.toIntent(row), nil
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

// toIntent is the intent as the provider shows it: an authorization past its capture_before has
// lapsed, and shows VOIDED (authorization_expired), as Stripe cancels it.
func (s *Sim) toIntent(r simdb.PaysimIntent) payment.Intent { return toIntent(r) }

func toIntent(r simdb.PaysimIntent) payment.Intent {
	in := payment.Intent{
		ID: r.ID, IdempotencyKey: r.IdempotencyKey, OrderID: r.OrderID, Status: payment.Status(r.Status),
		AmountMinor: r.AmountMinor, CapturedMinor: r.CapturedMinor, RefundedMinor: r.RefundedMinor,
		Currency: r.Currency, RedirectURL: r.RedirectUrl, DeclineCode: r.DeclineCode,
	}
	if r.CaptureBefore != nil {
		in.CaptureBefore = r.CaptureBefore.UTC()
		if in.Status == payment.StatusAuthorized && !time.Now().Before(*r.CaptureBefore) {
			in.Status, in.DeclineCode = payment.StatusVoided, payment.DeclineAuthorizationExpired
		}
	}
	return in
}

// newID returns prefix and 96 random bits in hex. Intent ids are unguessable because the 3-D
// Secure URL carries one.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b[:])
}
