package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteTable writes the run as a table, one row per fault, then what was checked and every loss.
func (r Result) WriteTable(w io.Writer, o Options) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	asExpected := 0
	for _, pl := range r.Load.Placed {
		if pl.AsExpected {
			asExpected++
		}
	}
	p("Faults under load: %d API replicas, %d workers, %d history shards, HOLD_TTL %s; %d shoppers (%s), %d orders in %.0f s of load\n\n",
		o.APIs, o.Workers, o.HistoryShards, o.HoldTTL, o.Shoppers, r.Load.Mix, r.Load.Orders, r.Load.LoadSeconds)
	p("| fault | at s | requests failed, by answer | first order after, s | recovered after, s | orders waiting through it (as their scenario says) |\n")
	p("|---|---:|---|---:|---:|---:|\n")
	row := func(f FaultResult, at string) {
		waited := "–"
		if at != "–" {
			waited = fmt.Sprintf("%d (%d)", f.Waited, f.WaitedAsExpected)
			if f.ProviderDown > 0 {
				waited += fmt.Sprintf("; %d answered PAYMENT_UNAVAILABLE, items released", f.ProviderDown)
			}
		}
		what := f.What
		if what == "" {
			what = f.Name
		}
		if f.Err != "" {
			what += " — " + f.Err
		}
		p("| %s | %s | %s | %s | %s | %s |\n", what, at, failed(f.Failed), seconds(f.FirstOrder), seconds(f.Recovered), waited)
	}
	row(r.Baseline, "–")
	for _, f := range r.Faults {
		row(f, fmt.Sprintf("%.1f", f.At))
	}
	p("\n- first order after: from the fault until the first order sent after it was answered (201 or a refusal of " +
		"the checkout's own, never a fault); recovered after: until the process was back and serving and such an " +
		"order answered. Requests failed: answers of the load from the fault to the next one, each try counted; " +
		"every one was repeated (an order with its Idempotency-Key) until answered.\n")
	keys := "every key names one order, the one in the database"
	if r.KeyLosses > 0 {
		keys = fmt.Sprintf("%d KEYS name another order than the database's, or more than one", r.KeyLosses)
	}
	p("- orders: %d placed, %d ended as their scenario says (or were refused for stock, a coupon or as BUSY); "+
		"answered by a fault first and repeated with their key: %d; %s\n", len(r.Load.Placed), asExpected, r.Retried, keys)
	p("- audit: %d invariants checked, %d violations\n", len(r.Audit.Checks), len(r.Audit.Violations))
	if len(r.Losses) == 0 {
		p("- losses: none\n")
	} else {
		p("- LOSSES (%d):\n", len(r.Losses))
		for _, l := range r.Losses {
			p("  - %s\n", l)
		}
		p("- the cluster's folder, with every process's log, is kept: %s\n", r.Dir)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// failed writes answers by count, most first: "503 UNAVAILABLE ×31, no answer (TIMEOUT) ×2".
func failed(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func seconds(s float64) string {
	if s < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", s)
}
