// Package features holds the feature switches: the work shoppers can live without under load,
// which ops turn off and on at run time, without a restart. Each switch turns off work, never
// correctness: what a switch leaves out is a hint or an event that comes later, and every decision
// (stock, price, payment) is made as before.
//
// The switches live in PostgreSQL (feature_switches), so every API and worker process sees one
// state; each process reads them through a cache of FEATURES_CACHE_TTL (a second), so a change
// reaches them all within it. A switch without a row is on.
package features

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/features/internal/featurestore"
)

// Name names a switch.
type Name string

// The switches.
const (
	// CartStockHints: the cart's stock hints, and the upkeep of the availability projection they
	// come from.
	CartStockHints Name = "cart_stock_hints"
	// PreviewStockWarnings: the checkout preview's LOW_STOCK and OUT_OF_STOCK warnings, and the
	// inventory read they come from.
	PreviewStockWarnings Name = "preview_stock_warnings"
	// AbandonedCartEvents: the cart clean-up, which deletes idle carts and writes their
	// abandoned-cart events.
	AbandonedCartEvents Name = "abandoned_cart_events"
)

// Switch is one switch and what turning it off does.
type Switch struct {
	Name    Name
	WhenOff string
}

// All lists every switch, in the order ops see them.
var All = []Switch{
	{CartStockHints, "the cart shows no stock hints (its answer lists cart_stock_hints under omitted) and the workers' " +
		"availability relay stops updating the projection; the order still checks stock, and the relay catches up when " +
		"the switch is on again"},
	{PreviewStockWarnings, "the checkout preview reads no stock: no LOW_STOCK or OUT_OF_STOCK warnings and no available " +
		"figures (its answer lists preview_stock_warnings under omitted); prices, priceVersion and the other warnings " +
		"are as before, and the order still checks stock"},
	{AbandonedCartEvents, "the cart clean-up defers its runs: idle carts are neither deleted nor reported as abandoned " +
		"until the switch is on again, when the next run does both; no event is lost"},
}

// Known says whether n names a switch.
func Known(n Name) bool {
	return slices.ContainsFunc(All, func(s Switch) bool { return s.Name == n })
}

// State is a switch as it stands: Enabled, and who last set it when (nil: never set, on).
type State struct {
	Switch
	Enabled   bool
	UpdatedAt *time.Time
	UpdatedBy *string
}

// Switches reads and sets the switches. Enabled answers from the process's cache, read again at
// most once per TTL (by one caller; the others keep the last state meanwhile). When PostgreSQL
// cannot be read, the last state holds (on, before the first read).
type Switches struct {
	pool *pgxpool.Pool
	q    *featurestore.Queries
	ttl  time.Duration
	log  *slog.Logger
	now  func() time.Time

	mu      sync.RWMutex
	off     map[Name]bool
	expires time.Time
	// gen counts this process's own changes: a read begun before one is not stored over it.
	gen     uint64
	loading atomic.Bool
}

// Options configure Switches; zero values take the defaults named on each field.
type Options struct {
	// TTL is how long a read of the switches is trusted (FEATURES_CACHE_TTL; 0: read at every use).
	TTL time.Duration
	// Log receives a warning when the switches cannot be read. Default slog.Default().
	Log *slog.Logger
	// Now is the clock of the cache. Default time.Now; tests move their own.
	Now func() time.Time
}

// New returns the switches of pool.
func New(pool *pgxpool.Pool, o Options) *Switches {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Switches{pool: pool, q: featurestore.New(pool), ttl: o.TTL, log: o.Log, now: o.Now, off: map[Name]bool{}}
}

// readTimeout bounds one read of the switches, so that a slow database does not hold the request
// that happened to refresh them.
const readTimeout = time.Second

// Enabled says whether the switch is on, as this process last read it. Without switches (nil)
// everything is on.
func (s *Switches) Enabled(ctx context.Context, n Name) bool {
	if s == nil {
		return true
	}
	s.refresh(ctx)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.off[n]
}

// Snapshot is every switch's position by name as this process sees it (read again if stale):
// what the process's metrics show.
func (s *Switches) Snapshot() map[string]bool {
	s.refresh(context.Background())
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]bool, len(All))
	for _, sw := range All {
		out[string(sw.Name)] = !s.off[sw.Name]
	}
	return out
}

func (s *Switches) refresh(ctx context.Context) {
	s.mu.RLock()
	fresh, gen := s.now().Before(s.expires), s.gen
	s.mu.RUnlock()
	if fresh || !s.loading.CompareAndSwap(false, true) {
		return
	}
	defer s.loading.Store(false)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	rows, err := s.q.FeatureSwitches(rctx)
	if err != nil {
		s.log.Warn("feature switches: read failed; the last ones read hold", "error", err)
	}
	s.store(rows, err, gen)
}

// store keeps what a read begun at generation gen found, unless this process changed a switch
// since.
func (s *Switches) store(rows []featurestore.FeatureSwitch, err error, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	s.expires = s.now().Add(s.ttl)
	if err != nil {
		return
	}
	off := make(map[Name]bool, len(rows))
	for _, r := range rows {
		if !r.Enabled {
			off[Name(r.Name)] = true
		}
	}
	s.off = off
}

// States reads every switch from PostgreSQL (not the cache), with who last set it when.
func (s *Switches) States(ctx context.Context) ([]State, error) {
	s.mu.RLock()
	gen := s.gen
	s.mu.RUnlock()
	rows, err := s.q.FeatureSwitches(ctx)
	if err != nil {
		return nil, err
	}
	s.store(rows, nil, gen)
	byName := make(map[Name]featurestore.FeatureSwitch, len(rows))
	for _, r := range rows {
		byName[Name(r.Name)] = r
	}
	out := make([]State, len(All))
	for i, sw := range All {
		out[i] = State{Switch: sw, Enabled: true}
		if r, ok := byName[sw.Name]; ok {
			at, by := r.UpdatedAt, r.UpdatedBy
			out[i].Enabled, out[i].UpdatedAt, out[i].UpdatedBy = r.Enabled, &at, &by
		}
	}
	return out, nil
}

// Set turns switches on or off, all in one transaction, recording by as who did it, and answers
// the ones whose position changed (a switch already where it is asked to be is left as it was).
// This process sees the change at once; the others within their TTL.
func (s *Switches) Set(ctx context.Context, to map[Name]bool, by string) (changed []Name, err error) {
	names := make([]Name, 0, len(to))
	for n := range to {
		if !Known(n) {
			return nil, fmt.Errorf("features: %q is not a switch", n)
		}
		names = append(names, n)
	}
	slices.Sort(names)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		changed = changed[:0]
		for _, n := range names {
			rows, err := q.SetFeatureSwitch(ctx, string(n), to[n], by)
			if err != nil {
				return err
			}
			if rows == 1 {
				changed = append(changed, n)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	off := make(map[Name]bool, len(s.off)+len(to))
	for n, v := range s.off {
		off[n] = v
	}
	for n, on := range to {
		off[n] = !on
	}
	s.off = off
	return changed, nil
}
