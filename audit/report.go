package audit

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report for people: what was looked at, each invariant with its count, and
// the violations (at most perInvariant of each; 0 means all).
func (r Report) WriteText(w io.Writer, perInvariant int) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Invariant audit at %s\n", r.CheckedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(b, "  inventory rows %d, ledger entries %d, reservations %d (%d ACTIVE)\n",
		r.InventoryRows, r.LedgerEntries, r.Reservations, r.ActiveReservations)
	fmt.Fprintf(b, "  orders %s\n", orderCounts(r.Orders))
	if r.OpenWorkflows >= 0 {
		fmt.Fprintf(b, "  open order and hold workflows in Temporal: %d\n", r.OpenWorkflows)
	} else {
		fmt.Fprintf(b, "  Temporal not asked: open workflows not checked\n")
	}
	if !r.ProviderChecked {
		fmt.Fprintf(b, "  payment provider not asked: its side of the money not checked, only the payments rows\n")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  invariant\tresult\trule")
	for _, c := range r.Checks {
		result := "ok"
		if c.Violations > 0 {
			result = fmt.Sprintf("%d VIOLATED", c.Violations)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Invariant, result, c.Rule)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	if r.OK() {
		b.WriteString("RESULT: OK — no invariant broken\n")
	} else {
		fmt.Fprintf(b, "RESULT: %d VIOLATIONS\n", len(r.Violations))
		shown := map[string]int{}
		for _, v := range r.Violations {
			shown[v.Invariant]++
			if perInvariant > 0 && shown[v.Invariant] > perInvariant {
				continue
			}
			fmt.Fprintf(b, "  [%s] %s: %s\n", v.Invariant, v.Subject, v.Detail)
		}
		for _, c := range r.Checks {
			if perInvariant > 0 && c.Violations > perInvariant {
				fmt.Fprintf(b, "  [%s] … and %d more (all of them with --json)\n", c.Invariant, c.Violations-perInvariant)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orderCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
