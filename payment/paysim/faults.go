package paysim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim/simdb"
)

// Faults is the provider's fault switch, one row in paysim.faults shared by every process. A zero
// field is unset: it leaves the process's Options default in force.
type Faults struct {
	// DownUntil: until then every Gateway call answers ErrUnavailable and changes nothing.
	DownUntil time.Time
	// MoneyDownUntil: until then every call that moves money (authorize, capture, reverse,
	// refund) answers ErrUnavailable and changes nothing, while lookups still answer.
	MoneyDownUntil time.Time
	// Latency is added to every Gateway call.
	Latency time.Duration
	// FailureRate in [0, 1] is the share of Gateway calls that answer ErrUnavailable before
	// doing anything.
	FailureRate float64
}

// faultsTTL is how long a process trusts its copy of the fault row: the simulator sits on the
// checkout's hot path, so it must not read the row on every call.
const faultsTTL = 250 * time.Millisecond

type faultSnapshot struct {
	f  Faults
	at time.Time
}

// SetFaults replaces the fault switch. This process sees it at once; other processes within
// faultsTTL. SetFaults(ctx, Faults{}) clears it.
func (s *Sim) SetFaults(ctx context.Context, f Faults) error {
	if f.Latency < 0 || f.FailureRate < 0 || f.FailureRate > 1 || math.IsNaN(f.FailureRate) {
		return fmt.Errorf("paysim: faults: latency must be >= 0 and failure rate in [0, 1]")
	}
	var (
		down, moneyDown *time.Time
		latency         *int32
		rate            pgtype.Float8
	)
	if !f.DownUntil.IsZero() {
		down = &f.DownUntil
	}
	if !f.MoneyDownUntil.IsZero() {
		moneyDown = &f.MoneyDownUntil
	}
	if f.Latency > 0 {
		ms := int32(min(f.Latency.Milliseconds(), math.MaxInt32))
		latency = &ms
	}
	if f.FailureRate > 0 {
		rate = pgtype.Float8{Float64: f.FailureRate, Valid: true}
	}
	if err := s.q.SetFaults(ctx, simdb.SetFaultsParams{DownUntil: down, MoneyDownUntil: moneyDown, LatencyMs: latency,
		FailureRate: rate}); err != nil {
		return fmt.Errorf("paysim: set faults: %w", err)
	}
	s.faults.Store(nil)
	return nil
}

// Faults reads the fault switch as stored (without this process's defaults).
func (s *Sim) Faults(ctx context.Context) (Faults, error) {
	row, err := s.q.Faults(ctx)
	if db.NotFound(err) {
		return Faults{}, nil
	}
	if err != nil {
		return Faults{}, fmt.Errorf("paysim: read faults: %w", err)
	}
	var f Faults
	if row.DownUntil != nil {
		f.DownUntil = *row.DownUntil
	}
	if row.MoneyDownUntil != nil {
		f.MoneyDownUntil = *row.MoneyDownUntil
	}
	if row.LatencyMs != nil {
		f.Latency = time.Duration(*row.LatencyMs) * time.Millisecond
	}
	if row.FailureRate.Valid {
		f.FailureRate = row.FailureRate.Float64
	}
	return f, nil
}

// currentFaults is the fault switch merged with the Options defaults, read at most once per
// faultsTTL per process.
func (s *Sim) currentFaults(ctx context.Context) (Faults, error) {
	if snap := s.faults.Load(); snap != nil && time.Since(snap.at) < faultsTTL {
		return snap.f, nil
	}
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	if snap := s.faults.Load(); snap != nil && time.Since(snap.at) < faultsTTL {
		return snap.f, nil
	}
	f, err := s.Faults(ctx)
	if err != nil {
		return Faults{}, err
	}
	if f.Latency == 0 {
		f.Latency = s.opts.Latency
	}
	if f.FailureRate == 0 {
		f.FailureRate = s.opts.FailureRate
	}
	s.faults.Store(&faultSnapshot{f: f, at: time.Now()})
	return f, nil
}

// gate applies the faults before a Gateway call does anything. A context that ends during the
// injected latency is a timeout, as it would be on a real network: for a write (mutating) the
// caller cannot know that nothing happened, so it gets ErrTimeout and must Lookup.
func (s *Sim) gate(ctx context.Context, op string, mutating bool) error {
	f, err := s.currentFaults(ctx)
	if err != nil {
		return fmt.Errorf("paysim: %s: %w: %w", op, payment.ErrUnavailable, err)
	}
	if time.Now().Before(f.DownUntil) {
		return fmt.Errorf("paysim: %s: provider down until %s: %w", op, f.DownUntil.Format(time.RFC3339), payment.ErrUnavailable)
	}
	if mutating && time.Now().Before(f.MoneyDownUntil) {
		return fmt.Errorf("paysim: %s: provider cannot move money until %s: %w", op, f.MoneyDownUntil.Format(time.RFC3339),
			payment.ErrUnavailable)
	}
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			if mutating {
				return fmt.Errorf("paysim: %s: %w: %w", op, payment.ErrTimeout, ctx.Err())
			}
			return fmt.Errorf("paysim: %s: %w: %w", op, payment.ErrUnavailable, ctx.Err())
		case <-t.C:
		}
	}
	if f.FailureRate > 0 && s.opts.Rand() < f.FailureRate {
		return fmt.Errorf("paysim: %s: injected failure: %w", op, payment.ErrUnavailable)
	}
	return nil
}
