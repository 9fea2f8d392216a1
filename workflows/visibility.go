package workflows

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
)

// maxTimeline bounds the timeline kept in the workflow's state.
const maxTimeline = 50

// setStatus keeps the order's status, its search attributes and the UI's details current.
func (w *orderFlow) setStatus(ctx workflow.Context, status order.Status, detail string) {
	w.st.Status = status
	w.note(ctx, lower(string(status)), detail)
}

// note adds to the timeline and the UI's details; the search attributes follow at the next wait.
func (w *orderFlow) note(ctx workflow.Context, event, detail string) {
	w.noteBy(ctx, event, detail, nil)
}

// noteBy is note of what a staff member did: the entry names the person (who, and through what
// and from where; when is its time, why its detail).
func (w *orderFlow) noteBy(ctx workflow.Context, event, detail string, actor *staff.Actor) {
	w.st.Timeline = appendTimeline(w.st.Timeline, TimelineEntry{At: workflow.Now(ctx), Event: event, Detail: detail,
		Actor: actor})
	if w.st.OrderID == 0 {
		return
	}
	w.searchDirty = true
	workflow.SetCurrentDetails(ctx, details(w.st))
}

// flushSearch writes the search attributes if they changed since they were last written. Each
// upsert is an event in the history and a write to the visibility store, so it happens only where
// the order is about to wait and when it ends: nothing leaves a workflow task before it completes,
// so what the UI can see is the same.
func (w *orderFlow) flushSearch(ctx workflow.Context) {
	if !w.searchDirty || w.st.OrderID == 0 {
		return
	}
	w.searchDirty = false
	escalated := w.st.Attention != nil && w.st.Attention.EscalatedAt != nil
	attrs := searchState{w.st.OrderID, w.st.Status, w.st.PaymentStatus, w.st.NeedsAttention, escalated}
	if attrs == w.searched {
		return
	}
	w.searched = attrs
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		AttrOrderID.ValueSet(w.st.OrderID),
		AttrCustomerID.ValueSet(w.st.CustomerID),
		AttrOrderStatus.ValueSet(string(w.st.Status)),
		AttrPaymentStatus.ValueSet(string(w.st.PaymentStatus)),
		AttrNeedsAttention.ValueSet(w.st.NeedsAttention),
		AttrEscalated.ValueSet(escalated))
}

// searchState is what the order's search attributes last said.
type searchState struct {
	orderID        int64
	status         order.Status
	paymentStatus  payment.Status
	needsAttention bool
	escalated      bool
}

// details is the markdown the Temporal UI shows for the order: readable without decoding payloads.
func details(st OrderState) string {
	var b strings.Builder
	add := func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) }
	add("**Order %d** · customer %d · **%s**", st.OrderID, st.CustomerID, st.Status)
	if st.FailureCode != "" {
		add(" (%s)", st.FailureCode)
	}
	add("\n\nPayment: **%s**", st.PaymentStatus)
	if st.IntentID != "" {
		add(" · intent `%s`", st.IntentID)
	}
	add("\n\nTotal: %s %s", money.FormatIn(st.TotalMinor, st.Currency), st.Currency)
	if st.HoldExpiresAt != nil {
		add(" · hold expires %s", st.HoldExpiresAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("\n\n| SKU | title | qty | unit price |\n|---|---|---|---|\n")
	for _, it := range st.Items {
		add("| %d | %s | %d | %s |\n", it.SKUID, markdownText(it.Title), it.Quantity, money.FormatIn(it.UnitPriceMinor, st.Currency))
	}
	if len(st.Allocations) > 0 {
		add("\nWarehouses: %s\n", allocationText(st.Allocations))
	}
	if a := st.Attention; a != nil {
		add("\n**Needs attention**: step `%s` failed: %s.", a.Step, markdownText(a.Error))
		if a.Code != "" {
			add(" The refusal (`%s`) does not change by retrying: the step waits for you.", a.Code)
		}
		switch {
		case a.GivesUpAt != nil:
			add(" **Escalated** %s: unless you act, the order is given up at %s (`%s`: stock back, payment voided).",
				a.EscalatedAt.UTC().Format(time.RFC3339), a.GivesUpAt.UTC().Format(time.RFC3339), problem.AttentionExpired)
		case a.EscalatedAt != nil:
			add(" **Escalated** %s: its stock or money goes back only once this step goes through.",
				a.EscalatedAt.UTC().Format(time.RFC3339))
		}
		add(" Send signal or update `support-action` with `{\"action\": \"retry\" | \"cancel\" | \"refund\", \"reason\": \"...\"}`.\n")
	}
	return b.String()
}

// markdownPunctuation are the characters Markdown gives a meaning to (every ASCII punctuation
// character, which a backslash turns back into itself).
const markdownPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// markdownText is text written by others (a seller's SKU title, an error) as literal text on one
// line of the details: every Markdown character escaped, so no link, image, autolink, HTML, code
// span, emphasis, heading, list or table cell can be made of it, nor a {workflowId} placeholder
// the UI would fill in; line breaks and other control characters become spaces.
func markdownText(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case strings.ContainsRune(markdownPunctuation, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.IsSpace(r):
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func allocationText(as []inventory.Allocation) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%d× SKU %d from warehouse %d", a.Quantity, a.SKUID, a.WarehouseID)
	}
	return strings.Join(parts, ", ")
}

func appendTimeline(tl []TimelineEntry, e TimelineEntry) []TimelineEntry {
	tl = append(tl, e)
	if len(tl) > maxTimeline {
		tl = tl[len(tl)-maxTimeline:]
	}
	return tl
}

func lower(s string) string { return strings.ToLower(s) }
