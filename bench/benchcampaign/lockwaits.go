package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/bench/internal/plain"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

// The lock-waits section: the plain checkout with the cart notices of the releases before the
// broker (a trigger's pg_notify in every cart write's transaction) and with today's (on the
// broker, after the commit), on one stack, in turns.
const (
	lockWaitsStart = "<!-- lockwaits-bench:start -->"
	lockWaitsEnd   = "<!-- lockwaits-bench:end -->"
	lockWaitRounds = 3
)

// notifyOn puts back migration 00008's trigger, as migration 00030 removed it: every change of a
// carts row queues a notification in its transaction.
const notifyOn = `
CREATE OR REPLACE FUNCTION cart_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN PERFORM pg_notify('cart_changed', '*');
    ELSIF TG_OP = 'DELETE' THEN PERFORM pg_notify('cart_changed', OLD.id);
    ELSIF TG_OP = 'INSERT' THEN PERFORM pg_notify('cart_changed', NEW.id || ' ' || NEW.version);
    ELSE
        IF OLD.id IS DISTINCT FROM NEW.id THEN PERFORM pg_notify('cart_changed', OLD.id); END IF;
        IF NEW.version > OLD.version THEN PERFORM pg_notify('cart_changed', NEW.id || ' ' || NEW.version);
        ELSE PERFORM pg_notify('cart_changed', NEW.id); END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER carts_changed AFTER INSERT OR UPDATE OR DELETE ON carts FOR EACH ROW EXECUTE FUNCTION cart_changed();
CREATE TRIGGER carts_truncated AFTER TRUNCATE ON carts FOR EACH STATEMENT EXECUTE FUNCTION cart_changed();`

const notifyOff = `
DROP TRIGGER IF EXISTS carts_truncated ON carts;
DROP TRIGGER IF EXISTS carts_changed ON carts;
DROP FUNCTION IF EXISTS cart_changed();`

func mainLockWaits(ctx context.Context, counts []int, window time.Duration, from, jsonOut, doc string) error {
	res, err := measureSection(from, jsonOut, doc, lockWaitsStart, lockWaitsEnd,
		func() (figures.LockWaitResults, error) { return runLockWaits(ctx, counts, window) }, renderLockWaits)
	if err != nil {
		return err
	}
	if !res.Audit.OK() {
		return fmt.Errorf("the audit found %d violations (listed in the section)", len(res.Audit.Violations))
	}
	return nil
}

func runLockWaits(ctx context.Context, counts []int, window time.Duration) (figures.LockWaitResults, error) {
	res := figures.LockWaitResults{StartedAt: time.Now().UTC(), WindowSeconds: window.Seconds(), Counts: counts,
		CPUs: benchkit.OnlineCPUs(), CPUModel: benchkit.CPUModel(), LoadBefore: benchkit.LoadAverage()}
	log.Printf("starting the dev stack")
	b, err := startDevBench(ctx, "checkout-bench-lockwaits-", admissionOff...)
	if err != nil {
		return res, err
	}
	defer b.close()
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		return res, err
	}
	if b.plainCheckout, err = plain.Start(ctx, b.stack.DatabaseURL, cfg.DBMaxConns, []byte(b.stack.Secret), cfg.HoldTTL); err != nil {
		return res, err
	}
	defer b.plainCheckout.Close()
	pool, err := db.Connect(ctx, b.stack.DatabaseURL, 4)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	for round := range lockWaitRounds {
		for _, n := range counts {
			for i := range 2 {
				notify := (i+round)%2 == 0
				sql := notifyOff
				if notify {
					sql = notifyOff + notifyOn
				}
				if _, err := pool.Exec(ctx, sql); err != nil {
					return res, err
				}
				r, err := b.loadRun(ctx, runPlainOK, n, window, okMix, b.plainCheckout.URL)
				if err != nil {
					return res, err
				}
				log.Printf("plain at %d shoppers, notify in postgres %v: %.1f orders/s, p99 %.0f ms, backends waiting on a lock %.2f",
					n, notify, r.PerSecond, r.P99Ms, r.Window.PG.Lock)
				res.Runs = append(res.Runs, figures.LockWaitRun{Notify: notify, Round: round + 1, Run: r})
			}
		}
	}
	if _, err := pool.Exec(ctx, notifyOff); err != nil {
		return res, err
	}
	if res.PlainSettle, err = plain.Settle(ctx, pool); err != nil {
		return res, fmt.Errorf("settling the plain orders: %w", err)
	}
	log.Printf("auditing")
	if res.Audit, err = auditDev(ctx, b.stack); err != nil {
		return res, err
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

func renderLockWaits(res figures.LockWaitResults) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	window := time.Duration(res.WindowSeconds * float64(time.Second))
	var counts []string
	for _, n := range res.Counts {
		counts = append(counts, fmt.Sprint(n))
	}
	w("%s\n### The plain checkout's lock waits, cart notices in PostgreSQL and on the broker\n\n", lockWaitsStart)
	w("Written by `make bench-lockwaits` (bench/benchcampaign -lockwaits); running it again replaces this section.\n\n")
	w("- Command: `make bench-lockwaits` (`bin/benchcampaign -lockwaits -shoppers %s -window %s`), measured %s on %d CPUs "+
		"(%s); 1-minute load average %.2f when the run began and %.2f when it ended (the machine is shared with "+
		"other work; compare runs side by side).\n", strings.Join(counts, ","), window,
		res.StartedAt.Format("2006-01-02 15:04 UTC"), res.CPUs, res.CPUModel, res.LoadBefore, res.LoadAfter)
	w("- One `bin/checkout-dev dev` stack (admission control off), the campaign section's **plain transaction, all tok_ok** "+
		"runs: `checkout-dev loadgen` shoppers (address, cart PUTs through the API, preview) posting their orders to the "+
		"one-transaction checkout endpoint of bench/internal/plain, %s each; %d rounds, each count run "+
		"twice per round, the two cases taking turns going first:\n", window, lockWaitRounds)
	w("  - **notify in PostgreSQL** (before): migration 00008's trigger put back on `carts`, so every cart write " +
		"queues a `pg_notify` in its transaction, as every release before the broker did;\n")
	w("  - **notices on the broker** (after): as this build runs, the API announcing each committed cart write on " +
		"`<prefix>.cart.changed`.\n")
	w("- PostgreSQL's client backends sampled every 100 ms during the load phase: the mean number running a statement, " +
		"and of them waiting on a heavyweight lock; the share of samples with any lock wait; the waits that weighed most " +
		"(event in statement, mean backends).\n\n")
	w("| round | shoppers | cart notices | orders/s | POST /orders p50 / p99 ms | PG active | PG waiting on a lock | samples with a lock wait | heaviest lock waits |\n")
	w("|---:|---:|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range res.Runs {
		how := "on the broker"
		if r.Notify {
			how = "**notify in PostgreSQL**"
		}
		pg := r.Run.Window.PG
		w("| %d | %d | %s | %.1f | %.0f / %.0f | %.2f | %.2f | %.0f %% | %s |\n", r.Round, r.Run.Shoppers, how, r.Run.PerSecond,
			r.Run.P50Ms, r.Run.P99Ms, pg.Active, pg.Lock, 100*pg.LockSamples, waits(pg.TopLocks))
	}
	w("\n| shoppers | cart notices | backends waiting on a lock: mean (lowest–highest) | orders/s: mean (lowest–highest) | p99 ms: mean (lowest–highest) |\n")
	w("|---:|---|---:|---:|---:|\n")
	for _, n := range res.Counts {
		for _, notify := range []bool{true, false} {
			var lock, rate, p99 []float64
			for _, r := range res.Runs {
				if r.Run.Shoppers == n && r.Notify == notify {
					lock, rate, p99 = append(lock, r.Run.Window.PG.Lock), append(rate, r.Run.PerSecond), append(p99, r.Run.P99Ms)
				}
			}
			how := "on the broker"
			if notify {
				how = "notify in PostgreSQL"
			}
			l, r, p := benchkit.SpreadOf(lock), benchkit.SpreadOf(rate), benchkit.SpreadOf(p99)
			w("| %d | %s | %.2f (%.2f–%.2f) | %.1f (%.1f–%.1f) | %.0f (%.0f–%.0f) |\n", n, how, l.Mean, l.Lo, l.Hi,
				r.Mean, r.Lo, r.Hi, p.Mean, p.Lo, p.Hi)
		}
	}
	w("\n")
	writeOutcome(&b, figures.Results{Runs: runsOf(res.Runs), Audit: res.Audit},
		fmt.Sprintf(" (the plain endpoint's %d unpaid orders cancelled and their stock given back first)", res.PlainSettle))
	w("%s\n", lockWaitsEnd)
	return b.String()
}

func runsOf(rs []figures.LockWaitRun) []figures.Run {
	out := make([]figures.Run, len(rs))
	for i, r := range rs {
		out[i] = r.Run
	}
	return out
}
