// Package chaos runs faults under load against `make cluster`'s shape (`make chaos`, and a short
// form in the end-to-end tests): it starts `checkout-dev cluster` on ports and a folder of its own,
// drives campaign traffic through HAProxy with `checkout-dev loadgen`'s shoppers, who repeat what a
// fault answered as a client does (an order with its Idempotency-Key), and meanwhile, one after
// another with recovery between, kills or freezes one process at a time, PostgreSQL among them.
// Then it judges the run: every order ended as its scenario says, every key names one order,
// nothing was answered 500 and every 5xx carried a code, and the invariant auditor is clean. Real
// processes only; every listener on loopback.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/loadgen"
	"github.com/marketplace/checkout/payment/paysim"
)

// Options are one run.
type Options struct {
	// Binary is the harness's binary (default bin/checkout-dev); Tools the folder of temporal-server
	// and the other programs (default: the binary's); Env the cluster's environment (default:
	// this process's).
	Binary, Tools string
	Env           []string
	// The cluster's shape.
	APIs, Workers, HistoryShards int
	// HoldTTL is the cluster's HOLD_TTL: short, so that abandoned orders end within the run, and
	// longer than any fault with room to spare (PostgreSQL's crash recovery took up to 40 s on a
	// loaded machine), so that a shopper who pays through one still pays within the hold.
	HoldTTL time.Duration
	// Shoppers place orders from the start of the load until Tail after the last fault was put
	// right.
	Shoppers int
	// Faults are injected in this order, the first Warmup into the load, then one every Spacing
	// (or as soon as the one before has recovered, when that took longer).
	Faults                []string
	Warmup, Spacing, Tail time.Duration
	// RecoverWithin bounds each fault's recovery: its process back and an order placed after it.
	RecoverWithin time.Duration
	// FrontendStop is how long the frontend stays frozen.
	FrontendStop time.Duration
	// RetryFor is how long a shopper repeats a request a fault answered.
	RetryFor time.Duration
	// Out receives a line per step; nil: none.
	Out io.Writer
}

// Full is `make chaos`: every fault, about six minutes of load and settling on top of the
// cluster's start.
func Full() Options {
	return Options{APIs: 2, Workers: 2, HistoryShards: 4, HoldTTL: time.Minute, Shoppers: 12,
		Faults: AllFaults, Warmup: 20 * time.Second, Spacing: 35 * time.Second, Tail: 15 * time.Second,
		RecoverWithin: 2 * time.Minute, FrontendStop: 10 * time.Second, RetryFor: 2 * time.Minute}
}

// Short is the form `make test` runs: a replica, the history service, PostgreSQL and the event
// broker, on a smaller load.
func Short() Options {
	o := Full()
	o.Faults = []string{FaultAPI, FaultHistory, FaultPostgres, FaultBroker}
	o.Shoppers = 6
	o.Warmup, o.Spacing, o.Tail = 10*time.Second, 20*time.Second, 5*time.Second
	return o
}

// Result is what a run saw and what it judged.
type Result struct {
	// Baseline is the load before the first fault; Faults, each fault and the load until the next.
	Baseline FaultResult
	Faults   []FaultResult
	Load     loadgen.Report
	Audit    audit.Report
	// Retried counts the orders a fault answered at least once, repeated with their key;
	// KeyLosses, the keys that named more than one order or another than the database's.
	Retried, KeyLosses int
	// Losses are what the run lost or got wrong; a good run has none.
	Losses []string
	// Dir is the cluster's folder, kept when there are losses.
	Dir string
}

// FaultResult is one fault and the load until the next.
type FaultResult struct {
	Name, What string
	// At is when it was injected, in seconds into the load.
	At float64
	// Failed counts the requests answered by a fault or a 5xx, by answer.
	Failed map[string]int
	// FirstOrder is how long after At the first order sent after it was answered (-1: none).
	FirstOrder float64
	// Recovered is how long after At the cluster had put it right (-1: not within the bound).
	Recovered float64
	// Waited counts the orders open when it struck that ended later, WaitedAsExpected those of
	// them that ended as their scenario says.
	Waited, WaitedAsExpected int
	// ProviderDown counts the orders placed while PostgreSQL restarted that were answered 503
	// PAYMENT_UNAVAILABLE: the simulated payment provider keeps its state in that database, so it
	// was down too, and the order failed with its items released (the audit checks nothing of it
	// is held). A real provider is not taken down by the checkout's database.
	ProviderDown int
	Err          string
}

type driver struct {
	opts     Options
	stack    *benchkit.Stack
	temporal client.Client
	tl       *timeline
}

// providerDownBy is the PostgreSQL fault an order answered PAYMENT_UNAVAILABLE was placed
// through (from its mark until the fault was put right), or -1.
func providerDownBy(faults []FaultResult, marks []time.Time, p loadgen.PlacedOrder, within time.Duration) int {
	if p.Answer != string(problem.PaymentUnavailable) {
		return -1
	}
	for i, f := range faults {
		end := within
		if f.Recovered >= 0 {
			end = time.Duration(f.Recovered * float64(time.Second))
		}
		if f.Name == FaultPostgres && !p.PlacedAt.Before(marks[i].Add(-5*time.Second)) && p.PlacedAt.Before(marks[i].Add(end)) {
			return i
		}
	}
	return -1
}

// Run starts the cluster, runs the load and the faults, and judges the run. An error is a run that
// could not be made (the cluster did not start); what went wrong under the faults is in
// Result.Losses.
func Run(ctx context.Context, o Options) (Result, error) {
	say := func(format string, a ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, "chaos: "+format+"\n", a...)
		}
	}
	faults := slices.Clone(o.Faults)
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	say("starting the cluster (%d API replicas, %d workers, HOLD_TTL %s)", o.APIs, o.Workers, o.HoldTTL)
	s, err := benchkit.StartClusterWith(ctx, benchkit.ClusterSpec{Binary: o.Binary, Tools: o.Tools, Prefix: "checkout-chaos-",
		Env: append(slices.Clone(env), "HOLD_TTL="+o.HoldTTL.String()),
		Args: []string{"--apis", fmt.Sprint(o.APIs), "--workers", fmt.Sprint(o.Workers),
			"--history-shards", fmt.Sprint(o.HistoryShards)}})
	if err != nil {
		return Result{}, err
	}
	defer s.Stop()
	tc, err := client.DialContext(ctx, client.Options{HostPort: s.Temporal, DataConverter: s.DataConverter,
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{TLS: s.TemporalTLS}})
	if err != nil {
		return Result{}, fmt.Errorf("temporal at %s: %w", s.Temporal, err)
	}
	defer tc.Close()
	d := &driver{opts: o, stack: s, temporal: tc, tl: &timeline{}}
	plan := make([]fault, len(faults))
	for i, name := range faults {
		if plan[i], err = d.faultOf(name); err != nil {
			return Result{}, err
		}
	}

	// The load ends Tail after the last fault was put right (or given up on): Duration only bounds it.
	load := o.Warmup + time.Duration(len(faults))*(o.Spacing+o.RecoverWithin) + o.Tail
	started := make(chan time.Time, 1)
	stopLoad := make(chan struct{})
	defer func() {
		select {
		case <-stopLoad:
		default:
			close(stopLoad)
		}
	}()
	cfg := loadgen.Config{BaseURL: s.Base, MetricsURL: s.Metrics, JWTSecret: s.Secret, OpsToken: s.OpsToken, Shoppers: o.Shoppers,
		Duration: load, Stop: stopLoad, HotShare: 0.3, CampaignHot: loadgen.DefaultCampaignHot, CouponShare: 0.2, RepeatShare: 0.1,
		Mix: loadgen.CampaignMix, HoldTTL: o.HoldTTL, WaitAbandoned: true, Settle: 2 * time.Minute,
		RetryFor: o.RetryFor, Observe: d.tl.add, KeepOrders: true,
		OnPhase: func(phase string) {
			if phase == loadgen.PhaseLoad {
				started <- time.Now()
			}
		}}
	if s.Tokens != nil { // the cluster's API takes its provider's tokens alone
		cfg.Tokens = s.Tokens
	}
	var rep loadgen.Report
	var loadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep, loadErr = loadgen.Run(ctx, cfg)
	}()
	var t0 time.Time
	select {
	case t0 = <-started:
	case <-done:
		return Result{}, fmt.Errorf("the load did not start: %w", loadErr)
	}
	say("load started: %d shoppers until %s after the last fault was put right; faults from %s on, every %s",
		o.Shoppers, o.Tail, o.Warmup, o.Spacing)

	res := Result{Dir: s.Dir}
	for i, f := range plan {
		at := t0.Add(o.Warmup + time.Duration(i)*o.Spacing)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		res.Faults = append(res.Faults, d.run(ctx, t0, f, say))
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(o.Tail):
	}
	close(stopLoad)
	say("faults done; the load ends, waiting for the orders to settle")
	<-done
	if loadErr != nil {
		return res, fmt.Errorf("load: %w", loadErr)
	}
	res.Load = rep
	say("load ended: %d orders; auditing", rep.Orders)
	if err := d.judge(ctx, t0, &res); err != nil {
		return res, err
	}
	s.Keep = len(res.Losses) > 0
	return res, nil
}

// run injects f and waits, within RecoverWithin, until it is put right and an order placed after
// it has been answered.
func (d *driver) run(ctx context.Context, t0 time.Time, f fault, say func(string, ...any)) FaultResult {
	r := FaultResult{Name: f.name, What: f.what, FirstOrder: -1, Recovered: -1}
	at := time.Now()
	r.At = at.Sub(t0).Seconds()
	say("%5.1f s  %s", r.At, f.what)
	if err := f.inject(ctx); err != nil {
		r.Err = err.Error()
		return r
	}
	deadline := at.Add(d.opts.RecoverWithin)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = f.back(pctx)
		cancel()
		if last == nil && d.tl.orderAnsweredAfter(at) {
			r.Recovered = time.Since(at).Seconds()
			say("%5.1f s  %s: recovered after %.1f s", time.Since(t0).Seconds(), f.name, r.Recovered)
			return r
		}
		time.Sleep(250 * time.Millisecond)
	}
	if last == nil {
		last = errors.New("no order was answered after it")
	}
	r.Err = fmt.Sprintf("not recovered within %s: %v", d.opts.RecoverWithin, last)
	say("%s: %s", f.name, r.Err)
	return r
}

// judge fills in each fault's row and the run's losses.
func (d *driver) judge(ctx context.Context, t0 time.Time, res *Result) error {
	marks := make([]time.Time, len(res.Faults))
	for i, f := range res.Faults {
		marks[i] = t0.Add(time.Duration(f.At * float64(time.Second)))
	}
	res.Baseline = FaultResult{Name: "before the first fault", FirstOrder: -1, Recovered: -1, Failed: map[string]int{}}
	for i := range res.Faults {
		res.Faults[i].Failed = map[string]int{}
	}
	var losses []string
	lose := func(format string, a ...any) { losses = append(losses, fmt.Sprintf(format, a...)) }
	bad := map[string]int{}
	for _, o := range d.tl.all() {
		if o.Status >= 500 && o.Status != 502 && o.Status != 503 && o.Status != 504 {
			bad[fmt.Sprintf("%s answered %d %s", o.Endpoint, o.Status, o.Code)]++
		}
		// Every 5xx of a dependency down carries Retry-After, and a code but on the provider's
		// HTML page.
		if (o.Status == 502 || o.Status == 503 || o.Status == 504) &&
			((o.Code == "" && o.Endpoint != loadgen.EndpointThreeDS) || o.RetryAfter == 0) {
			bad[fmt.Sprintf("%s answered %d without a code and Retry-After", o.Endpoint, o.Status)]++
		}
		if !o.Fault() && o.Status < 500 {
			continue
		}
		row := &res.Baseline
		for i := len(marks) - 1; i >= 0; i-- {
			if !o.Done.Before(marks[i]) {
				row = &res.Faults[i]
				break
			}
		}
		row.Failed[answerName(o)]++
	}
	for _, k := range sortedKeys(bad) {
		lose("%d× %s", bad[k], k)
	}
	for i := range res.Faults {
		f := &res.Faults[i]
		if f.Err != "" {
			lose("%s: %s", f.Name, f.Err)
		}
		if first, ok := d.tl.firstOrderAfter(marks[i]); ok {
			f.FirstOrder = first.Sub(marks[i]).Seconds()
		}
	}

	// Every order as its scenario says, every key naming one order, and the database agreeing.
	rep := res.Load
	placed := map[int64]loadgen.PlacedOrder{}
	var users []int64
	for _, p := range rep.Placed {
		users = append(users, p.User)
		placed[p.User] = p
		if !p.AsExpected {
			if i := providerDownBy(res.Faults, marks, p, d.opts.RecoverWithin); i >= 0 {
				res.Faults[i].ProviderDown++
			} else {
				lose("order %d (key %s, %s) ended %q, answer %s", p.OrderID, p.Key, p.Scenario, p.Final, p.Answer)
			}
		}
		if len(p.Named) > 1 {
			res.KeyLosses++
			lose("key %s named orders %v", p.Key, p.Named)
		}
		if p.Faults > 0 {
			res.Retried++
		}
	}
	for _, m := range rep.Mismatches {
		lose("a key answered differently the second time: %s", m)
	}
	for _, st := range rep.Stopped {
		if strings.Contains(st.Outcome, "no answer") || strings.Contains(st.Outcome, ": 5") {
			lose("%d shoppers gave up (%s) after repeating for %s", st.Orders, st.Outcome, d.opts.RetryFor)
		}
	}
	pool, err := db.Connect(ctx, d.stack.DatabaseURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT user_id, idempotency_key, id, created_at, updated_at FROM orders WHERE user_id = ANY($1)`, users)
	if err != nil {
		return err
	}
	type row struct {
		user, id           int64
		key                string
		created, finalised time.Time
	}
	byUser := map[int64][]row{}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.user, &r.key, &r.id, &r.created, &r.finalised); err != nil {
			return err
		}
		byUser[r.user] = append(byUser[r.user], r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for user, p := range placed {
		got := byUser[user]
		switch {
		case len(got) > 1:
			res.KeyLosses++
			lose("shopper %d placed one order (key %s) and has %d", user, p.Key, len(got))
		case p.OrderID != 0 && (len(got) == 0 || got[0].id != p.OrderID || got[0].key != p.Key):
			res.KeyLosses++
			lose("key %s was answered with order %d, the database has %v", p.Key, p.OrderID, got)
		}
		for _, r := range got {
			for i := range res.Faults {
				if r.created.Before(marks[i]) && r.finalised.After(marks[i]) {
					res.Faults[i].Waited++
					if p.AsExpected {
						res.Faults[i].WaitedAsExpected++
					}
				}
			}
		}
	}

	// Every event written reached the broker, once: the outbox drained, and the stream holds as
	// many events as were published (none lost with the broker's nodes, none stored twice).
	if err := d.eventsDelivered(ctx, pool, lose); err != nil {
		return err
	}

	o := audit.Options{HoldTTL: d.opts.HoldTTL, Slack: 30 * time.Second, Visibility: d.temporal, TaskQueue: config.DefaultTaskQueue,
		Provider: paysim.NewRecords(pool)}
	res.Audit, err = audit.Run(ctx, pool, o)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	for _, v := range res.Audit.Violations {
		lose("audit: %s %s: %s", v.Invariant, v.Subject, v.Detail)
	}
	res.Losses = losses
	return nil
}

// answerName names an answer in the table: "503 UNAVAILABLE", "no answer (TIMEOUT)".
func answerName(o loadgen.Observation) string {
	if o.Status == 0 {
		return "no answer (" + o.Code + ")"
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s", o.Status, o.Code))
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// timeline is every measured request of the load, as loadgen observed it.
type timeline struct {
	mu  sync.Mutex
	obs []loadgen.Observation
}

func (t *timeline) add(o loadgen.Observation) {
	t.mu.Lock()
	t.obs = append(t.obs, o)
	t.mu.Unlock()
}

func (t *timeline) all() []loadgen.Observation {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.obs)
}

// firstOrderAfter is when the first order sent at or after at was answered, other than by a fault
// or a 5xx.
func (t *timeline) firstOrderAfter(at time.Time) (time.Time, bool) {
	var first time.Time
	for _, o := range t.all() {
		if (o.Endpoint == loadgen.EndpointOrder || o.Endpoint == loadgen.EndpointOrderRepeat) && !o.Sent.Before(at) &&
			!o.Fault() && o.Status > 0 && o.Status < 500 && (first.IsZero() || o.Done.Before(first)) {
			first = o.Done
		}
	}
	return first, !first.IsZero()
}

func (t *timeline) orderAnsweredAfter(at time.Time) bool {
	_, ok := t.firstOrderAfter(at)
	return ok
}

// eventsDelivered waits (up to RecoverWithin) for the outbox to drain, then compares what was
// published with what the stream holds.
func (d *driver) eventsDelivered(ctx context.Context, pool *pgxpool.Pool, lose func(string, ...any)) error {
	var pending, published int64
	deadline := time.Now().Add(d.opts.RecoverWithin)
	for {
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL),
				count(*) FILTER (WHERE published_at IS NOT NULL) FROM outbox_events`).Scan(&pending, &published); err != nil {
			return err
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if pending > 0 {
		lose("%d events still not on the broker %s after the load", pending, d.opts.RecoverWithin)
	}
	b, err := events.Connect(events.Options{URL: "nats://127.0.0.1:" + strconv.Itoa(d.stack.Ports.NATS), Prefix: "checkout", Name: "chaos"})
	if err != nil {
		return err
	}
	defer b.Close()
	st, err := b.JetStream().Stream(ctx, events.StreamName("checkout"))
	if err != nil {
		lose("the event stream cannot be read: %v", err)
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		lose("the event stream cannot be read: %v", err)
		return nil
	}
	if int64(info.State.Msgs) != published {
		lose("the outbox published %d events and the stream holds %d", published, info.State.Msgs)
	}
	return nil
}
