// Package webhooks sends sellers the events of their own SKUs' orders, signed by the Standard
// Webhooks convention: sellers register endpoints (Endpoints), the fan-out turns the broker's order
// events into one delivery per endpoint with the seller's own part of each (Fanout), and the
// dispatcher sends them, in order per endpoint, retried with back-off for a day before the
// endpoint is disabled (Dispatcher). Endpoints are only where the seller said, and outside dev
// never the checkout's own network (Targets).
package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/webhooks/internal/webhookstore"
)

// Endpoint statuses.
const (
	StatusEnabled  = "ENABLED"
	StatusDisabled = "DISABLED"
)

// Delivery statuses.
const (
	DeliveryPending   = "PENDING"
	DeliveryDelivered = "DELIVERED"
	DeliveryFailed    = "FAILED"
)

// Endpoints manages sellers' endpoints, their secrets and their delivery logs.
type Endpoints struct {
	Pool    *pgxpool.Pool
	Targets Targets
	// MaxPerSeller bounds a seller's endpoints (default 10).
	MaxPerSeller int
	// SecretOverlap is how long a rotated secret keeps signing beside the new one (default 24h).
	SecretOverlap time.Duration
}

// Refusals of Endpoints.
var (
	ErrNotFound = errors.New("no such endpoint or delivery")
	ErrTooMany  = errors.New("too many endpoints")
)

// InvalidError names the field of a request that cannot be accepted; Forbidden, a target the
// checkout never sends to (ErrForbiddenTarget).
type InvalidError struct {
	Field, Message string
	Forbidden      bool
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Message }

// Endpoint is a seller's endpoint as the seller and ops read it.
type Endpoint struct {
	ID             int64      `json:"id"`
	SellerID       int64      `json:"sellerId"`
	URL            string     `json:"url"`
	EventTypes     []string   `json:"eventTypes"`
	Description    string     `json:"description"`
	Status         string     `json:"status"`
	DisabledReason string     `json:"disabledReason,omitempty"`
	DisabledAt     *time.Time `json:"disabledAt,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
}

func endpointOf(e webhookstore.WebhookEndpoint) Endpoint {
	out := Endpoint{ID: e.ID, SellerID: e.SellerID, URL: e.Url, EventTypes: e.EventTypes, Description: e.Description,
		Status: e.Status, DisabledAt: e.DisabledAt, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
	if e.DisabledReason != nil {
		out.DisabledReason = *e.DisabledReason
	}
	return out
}

// Spec is what a seller registers or changes.
type Spec struct {
	URL         string
	EventTypes  []string
	Description string
}

func (s Endpoints) check(ctx context.Context, spec Spec) (Spec, error) {
	if len(spec.Description) > 200 {
		return spec, &InvalidError{Field: "description", Message: "at most 200 characters"}
	}
	if len(spec.URL) > 2048 {
		return spec, &InvalidError{Field: "url", Message: "at most 2048 characters"}
	}
	u, err := s.Targets.Check(ctx, spec.URL)
	if err != nil {
		return spec, &InvalidError{Field: "url", Message: err.Error(), Forbidden: errors.Is(err, ErrForbiddenTarget)}
	}
	spec.URL = u.String()
	if len(spec.EventTypes) == 0 {
		return spec, &InvalidError{Field: "eventTypes", Message: fmt.Sprintf("at least one of %v", Subscribable)}
	}
	var types []string
	for _, t := range spec.EventTypes {
		if !slices.Contains(Subscribable, t) {
			return spec, &InvalidError{Field: "eventTypes", Message: fmt.Sprintf("%q: one of %v", t, Subscribable)}
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	spec.EventTypes = types
	return spec, nil
}

// Create registers an endpoint and its first secret, which is returned once (FormatSecret).
func (s Endpoints) Create(ctx context.Context, sellerID int64, spec Spec) (Endpoint, string, error) {
	spec, err := s.check(ctx, spec)
	if err != nil {
		return Endpoint{}, "", err
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, "", err
	}
	var out webhookstore.WebhookEndpoint
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := webhookstore.New(tx)
		if err := db.LockUser(ctx, tx, db.LockWebhookEndpoints, sellerID); err != nil {
			return err
		}
		n, err := q.CountWebhookEndpoints(ctx, sellerID)
		if err != nil {
			return err
		}
		if n >= int64(s.maxPerSeller()) {
			return ErrTooMany
		}
		if out, err = q.CreateWebhookEndpoint(ctx, webhookstore.CreateWebhookEndpointParams{SellerID: sellerID, Url: spec.URL,
			EventTypes: spec.EventTypes, Description: spec.Description}); err != nil {
			return err
		}
		return q.InsertWebhookSecret(ctx, out.ID, secret)
	})
	if err != nil {
		return Endpoint{}, "", err
	}
	return endpointOf(out), FormatSecret(secret), nil
}

func (s Endpoints) maxPerSeller() int {
	if s.MaxPerSeller > 0 {
		return s.MaxPerSeller
	}
	return 10
}

// List is a seller's endpoints; ops pass sellerID 0 for every seller's.
func (s Endpoints) List(ctx context.Context, sellerID int64, all bool) ([]Endpoint, error) {
	var rows []webhookstore.WebhookEndpoint
	var err error
	if all {
		rows, err = webhookstore.New(s.Pool).WebhookEndpoints(ctx, sellerID)
	} else {
		rows, err = webhookstore.New(s.Pool).SellerWebhookEndpoints(ctx, sellerID)
	}
	out := make([]Endpoint, 0, len(rows))
	for _, r := range rows {
		out = append(out, endpointOf(r))
	}
	return out, err
}

// Get is one of a seller's endpoints (another seller's is not found).
func (s Endpoints) Get(ctx context.Context, sellerID, id int64) (Endpoint, error) {
	e, err := webhookstore.New(s.Pool).SellerWebhookEndpoint(ctx, id, sellerID)
	if db.NotFound(err) {
		return Endpoint{}, ErrNotFound
	}
	return endpointOf(e), err
}

// Owner is the seller of an endpoint, for ops.
func (s Endpoints) Owner(ctx context.Context, id int64) (int64, error) {
	e, err := webhookstore.New(s.Pool).WebhookEndpoint(ctx, id)
	if db.NotFound(err) {
		return 0, ErrNotFound
	}
	return e.SellerID, err
}

// Update changes an endpoint's URL, types and description.
func (s Endpoints) Update(ctx context.Context, sellerID, id int64, spec Spec) (Endpoint, error) {
	spec, err := s.check(ctx, spec)
	if err != nil {
		return Endpoint{}, err
	}
	e, err := webhookstore.New(s.Pool).UpdateWebhookEndpoint(ctx, webhookstore.UpdateWebhookEndpointParams{Url: spec.URL,
		EventTypes: spec.EventTypes, Description: spec.Description, ID: id, SellerID: sellerID})
	if db.NotFound(err) {
		return Endpoint{}, ErrNotFound
	}
	return endpointOf(e), err
}

// SetEnabled enables an endpoint (what waited, and what was given up when it was disabled for
// failing, goes out in order) or disables it (its deliveries wait).
func (s Endpoints) SetEnabled(ctx context.Context, sellerID, id int64, enabled bool) (Endpoint, error) {
	q := webhookstore.New(s.Pool)
	var e webhookstore.WebhookEndpoint
	var err error
	if enabled {
		var r webhookstore.EnableWebhookEndpointRow
		r, err = q.EnableWebhookEndpoint(ctx, id, sellerID)
		e = webhookstore.WebhookEndpoint(r)
	} else {
		reason := "disabled by the seller"
		e, err = q.DisableWebhookEndpoint(ctx, &reason, id, sellerID)
	}
	if db.NotFound(err) {
		return Endpoint{}, ErrNotFound
	}
	return endpointOf(e), err
}

// Delete removes an endpoint with its secrets and deliveries.
func (s Endpoints) Delete(ctx context.Context, sellerID, id int64) error {
	n, err := webhookstore.New(s.Pool).DeleteWebhookEndpoint(ctx, id, sellerID)
	if err == nil && n == 0 {
		return ErrNotFound
	}
	return err
}

// RotateSecret makes a new secret, returned once; the one it replaces keeps signing beside it
// until the returned time, so the seller's receiver can move without a gap.
func (s Endpoints) RotateSecret(ctx context.Context, sellerID, id int64) (string, time.Time, error) {
	if _, err := s.Get(ctx, sellerID, id); err != nil {
		return "", time.Time{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	overlap := s.SecretOverlap
	if overlap <= 0 {
		overlap = 24 * time.Hour
	}
	var until time.Time
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := webhookstore.New(tx)
		var err error
		if until, err = q.RotateWebhookSecrets(ctx, overlap.Seconds(), id); err != nil {
			return err
		}
		return q.InsertWebhookSecret(ctx, id, secret)
	})
	return FormatSecret(secret), until, err
}

// Attempt is one try of a delivery.
type Attempt struct {
	At         time.Time `json:"at"`
	StatusCode *int32    `json:"statusCode,omitempty"`
	LatencyMs  int32     `json:"latencyMs"`
	Error      string    `json:"error,omitempty"`
	Replay     bool      `json:"replay,omitempty"`
}

// Delivery is one event for one endpoint, as its log shows it.
type Delivery struct {
	ID             int64      `json:"id"`
	EventID        int64      `json:"eventId"`
	EventType      string     `json:"eventType"`
	Status         string     `json:"status"`
	Attempts       int32      `json:"attempts"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt,omitempty"`
	LastAttemptAt  *time.Time `json:"lastAttemptAt,omitempty"`
	LastStatusCode *int32     `json:"lastStatusCode,omitempty"`
	LastError      string     `json:"lastError,omitempty"`
	LastLatencyMs  *int32     `json:"lastLatencyMs,omitempty"`
	DeliveredAt    *time.Time `json:"deliveredAt,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	// Body and AttemptLog: one delivery read alone.
	Body       []byte    `json:"body,omitempty"`
	AttemptLog []Attempt `json:"attemptLog,omitempty"`
}

// Deliveries is an endpoint's log, newest first: limit rows before the delivery id before (0:
// the newest), of one status (empty: any).
func (s Endpoints) Deliveries(ctx context.Context, sellerID, endpointID int64, status string, before int64, limit int32) ([]Delivery, error) {
	if _, err := s.Get(ctx, sellerID, endpointID); err != nil {
		return nil, err
	}
	rows, err := webhookstore.New(s.Pool).WebhookDeliveries(ctx, webhookstore.WebhookDeliveriesParams{EndpointID: endpointID,
		BeforeID: before, Status: status, MaxRows: limit})
	out := make([]Delivery, 0, len(rows))
	for _, r := range rows {
		d := Delivery{ID: r.ID, EventID: r.EventID, EventType: r.EventType, Status: r.Status, Attempts: r.Attempts,
			LastAttemptAt: r.LastAttemptAt, LastStatusCode: r.LastStatusCode, LastLatencyMs: r.LastLatencyMs,
			DeliveredAt: r.DeliveredAt, CreatedAt: r.CreatedAt}
		if r.Status == DeliveryPending {
			d.NextAttemptAt = &r.NextAttemptAt
		}
		if r.LastError != nil {
			d.LastError = *r.LastError
		}
		out = append(out, d)
	}
	return out, err
}

// Delivery is one delivery with its body and every attempt.
func (s Endpoints) Delivery(ctx context.Context, sellerID, endpointID, id int64) (Delivery, error) {
	if _, err := s.Get(ctx, sellerID, endpointID); err != nil {
		return Delivery{}, err
	}
	q := webhookstore.New(s.Pool)
	r, err := q.WebhookDelivery(ctx, id, endpointID)
	if db.NotFound(err) {
		return Delivery{}, ErrNotFound
	}
	if err != nil {
		return Delivery{}, err
	}
	d := Delivery{ID: r.ID, EventID: r.EventID, EventType: r.EventType, Status: r.Status, Attempts: r.Attempts,
		LastAttemptAt: r.LastAttemptAt, LastStatusCode: r.LastStatusCode, LastLatencyMs: r.LastLatencyMs,
		DeliveredAt: r.DeliveredAt, CreatedAt: r.CreatedAt, Body: r.Body, AttemptLog: []Attempt{}}
	if r.Status == DeliveryPending {
		d.NextAttemptAt = &r.NextAttemptAt
	}
	if r.LastError != nil {
		d.LastError = *r.LastError
	}
	attempts, err := q.WebhookAttempts(ctx, id)
	for _, a := range attempts {
		at := Attempt{At: a.At, StatusCode: a.StatusCode, LatencyMs: a.LatencyMs, Replay: a.Replay}
		if a.Error != nil {
			at.Error = *a.Error
		}
		d.AttemptLog = append(d.AttemptLog, at)
	}
	return d, err
}

// Replay sends a delivery again (once the endpoint's older waiting deliveries have gone), with
// the same webhook-id: a receiver that keeps the ids it handled drops it.
func (s Endpoints) Replay(ctx context.Context, sellerID, endpointID, id int64) error {
	if _, err := s.Get(ctx, sellerID, endpointID); err != nil {
		return err
	}
	_, err := webhookstore.New(s.Pool).ReplayWebhookDelivery(ctx, id, endpointID)
	if db.NotFound(err) {
		return ErrNotFound
	}
	return err
}
