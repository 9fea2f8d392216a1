package paysim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim/simdb"
)

// deliverBatch is how many due events one deliverer round claims; they are sent in parallel, so
// a batch takes at most one DeliveryTimeout and stays within its lease.
const deliverBatch = 16

// Approve is the shopper approving 3-D Secure: REQUIRES_ACTION → AUTHORIZED, and a
// payment_intent.authorized webhook. An intent no longer waiting (voided because the hold
// expired, or already answered) is ErrInvalidState, returned with the intent as it stands, and
// sends nothing.
func (s *Sim) Approve(ctx context.Context, intentID string) (payment.Intent, error) {
	return s.authenticate(ctx, intentID, payment.StatusAuthorized, "", payment.EventAuthorized)
}

// Decline is the shopper refusing 3-D Secure: REQUIRES_ACTION → DECLINED
// ("authentication_failed"), and a payment_intent.declined webhook. Errors as for Approve.
func (s *Sim) Decline(ctx context.Context, intentID string) (payment.Intent, error) {
	return s.authenticate(ctx, intentID, payment.StatusDeclined, DeclineAuthentication, payment.EventDeclined)
}

// authenticate moves the intent and enqueues its webhook in one transaction, so there is never an
// answered intent without its event, then sends the event at once in the background.
func (s *Sim) authenticate(ctx context.Context, intentID string, to payment.Status, declineCode, eventType string) (payment.Intent, error) {
	op := "3-D Secure " + string(to)
	deliverNow := s.startDelivery()
	started := false
	defer func() {
		if deliverNow && !started {
			s.inflight.Done()
		}
	}()

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, false)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	q := s.q.WithTx(tx)
	p := simdb.AuthenticateParams{Status: string(to), DeclineCode: declineCode, ID: intentID}
	if to == payment.StatusAuthorized {
		until := time.Now().Add(s.opts.AuthorizationWindow)
		p.CaptureBefore = &until
	}
	row, err := q.Authenticate(ctx, p)
	if db.NotFound(err) {
		_ = tx.Rollback(ctx)
		cur, err := s.q.IntentByID(ctx, intentID)
		if db.NotFound(err) {
			return payment.Intent{}, fmt.Errorf("paysim: %s %s: %w", op, intentID, payment.ErrNotFound)
		}
		if err != nil {
			return payment.Intent{}, s.dbErr(ctx, op, err, false)
		}
		return toIntent(cur), fmt.Errorf("paysim: %s %s: intent is %s: %w", op, intentID, cur.Status, payment.ErrInvalidState)
	}
	if err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, true)
	}
	intent := toIntent(row)
	ev := payment.WebhookEvent{ID: newID("evt_"), Type: eventType, Created: time.Now().UTC().Truncate(time.Millisecond), Intent: intent}
	body, err := json.Marshal(ev)
	if err != nil {
		return payment.Intent{}, fmt.Errorf("paysim: %s: encode event: %w", op, err)
	}
	claim := 0.0
	if deliverNow {
		claim = s.lease().Seconds()
	}
	if err := q.EnqueueWebhook(ctx, simdb.EnqueueWebhookParams{
		ID: ev.ID, IntentID: intent.ID, Type: ev.Type, Payload: body, ClaimSeconds: claim,
	}); err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, true)
	}
	if err := tx.Commit(ctx); err != nil {
		return payment.Intent{}, s.dbErr(ctx, op, err, true)
	}
	if deliverNow {
		started = true
		go func() {
			defer s.inflight.Done()
			s.deliver(context.WithoutCancel(ctx), ev.ID, body, 0)
		}()
	}
	s.poke()
	return intent, nil
}

// startDelivery reports whether this process will send a new event itself, and if so counts the
// delivery for Close.
func (s *Sim) startDelivery() bool {
	if s.opts.WebhookURL == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Sim) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// lease is how long a claimed event is left to its claimant: longer than a delivery can take.
func (s *Sim) lease() time.Duration { return 2*s.opts.DeliveryTimeout + 5*time.Second }

// RunDeliverer sends the undelivered webhooks until ctx ends, then returns nil. Run it in the
// process whose Sim has the WebhookURL (the API); several replicas share the work. It is the
// safety net behind the immediate send of Approve/Decline: it retries failures with exponential
// backoff (RetryBase doubling to RetryMax) and gives up on events older than GiveUpAfter.
func (s *Sim) RunDeliverer(ctx context.Context) error {
	if s.opts.WebhookURL == "" {
		return errors.New("paysim: RunDeliverer needs Options.WebhookURL")
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		n, err := s.deliverDue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Warn("webhook deliverer: claim failed", "error", err)
		}
		if n == deliverBatch {
			continue // there may be more due
		}
		poll.Reset(s.opts.PollInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-poll.C:
		}
	}
}

// deliverDue claims one batch of due events and sends them in parallel. Deliveries in flight
// finish even when ctx ends, so that their outcome is recorded.
func (s *Sim) deliverDue(ctx context.Context) (int, error) {
	rows, err := s.q.ClaimDueWebhooks(ctx, s.lease().Seconds(), deliverBatch)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Go(func() { s.deliver(context.WithoutCancel(ctx), r.ID, r.Payload, r.Attempts) })
	}
	wg.Wait()
	return len(rows), nil
}

// deliver sends one event and records the outcome. attempts is the count before this one.
func (s *Sim) deliver(ctx context.Context, id string, body []byte, attempts int32) {
	sendErr := s.post(ctx, body)
	dbCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if sendErr == nil {
		if err := s.q.WebhookDelivered(dbCtx, id); err != nil {
			// The receiver has it; a retry later is a harmless duplicate.
			s.log.Warn("webhook delivered but not recorded", "event_id", id, "error", err)
		}
		return
	}
	msg := sendErr.Error()
	res, err := s.q.WebhookFailed(dbCtx, simdb.WebhookFailedParams{
		ID: id, LastError: &msg, RetrySeconds: s.backoff(attempts + 1).Seconds(),
		GiveUpSeconds: s.opts.GiveUpAfter.Seconds(),
	})
	switch {
	case err != nil:
		s.log.Warn("webhook failed and not recorded", "event_id", id, "error", err, "send_error", msg)
	case res.GaveUpAt != nil:
		s.log.Error("webhook given up", "event_id", id, "attempts", res.Attempts, "error", msg)
	default:
		s.log.Warn("webhook delivery failed, will retry", "event_id", id, "attempts", res.Attempts, "error", msg)
	}
}

// backoff is the delay after the n-th failed attempt: RetryBase·2^(n-1), ±20% jitter so that a
// receiver coming back is not hit by every event at once, capped at RetryMax.
func (s *Sim) backoff(n int32) time.Duration {
	d := s.opts.RetryBase
	for i := int32(1); i < n && d < s.opts.RetryMax; i++ {
		d *= 2
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*s.opts.Rand()))
	return min(d, s.opts.RetryMax)
}

// post sends body signed to the WebhookURL; only a 2xx answer is a delivery.
func (s *Sim) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DeliveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysim/1")
	req.Header.Set(payment.SignatureHeader, payment.Sign(s.opts.WebhookSecret, body, time.Now()))
	resp, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook receiver answered %d", resp.StatusCode)
	}
	return nil
}
