package workflows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/pricing"
)

// unescapedMarkdown lists the Markdown characters of s that no backslash escapes.
func unescapedMarkdown(s string) []string {
	var out []string
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			escaped = false
		case r == '\\':
			escaped = true
		case strings.ContainsRune(markdownPunctuation, r):
			out = append(out, string(r))
		}
	}
	return out
}

// unescape reads back what a Markdown renderer shows for escaped text.
func unescape(s string) string {
	var b strings.Builder
	escaped := false
	for _, r := range s {
		if r == '\\' && !escaped {
			escaped = true
			continue
		}
		escaped = false
		b.WriteRune(r)
	}
	return b.String()
}

// TestDetails_SellerWrittenTitle_ShownAsTextNeverAsMarkdown: a seller's SKU title goes into the
// details the Temporal UI renders as Markdown; whatever it holds, it renders as the title's own
// text in its table cell — no link, image, HTML, code span, emphasis, heading, extra cell or line,
// nor a placeholder the UI fills in.
func TestDetails_SellerWrittenTitle_ShownAsTextNeverAsMarkdown(t *testing.T) {
	t.Parallel()
	for _, title := range []string{
		"Konsol — 1 TB, Türkçe menü",
		"[Click for a refund](https://evil.example/steal?x=1)",
		"![tracker](https://evil.example/pixel.png)",
		"<img src=x onerror=alert(1)><script>alert(1)</script>",
		"<https://evil.example> www.evil.example",
		"`code` **bold** _it_ ~~gone~~ *em*",
		"# Heading\n\n- list item\r\n> quote",
		"a | b | c",
		"{workflowId} {namespace} {runId}",
		`&lt;b&gt; \escaped\ &amp;`,
		"[ref]: https://evil.example",
		"tab\there\u2028line separator\x00nul",
	} {
		st := OrderState{OrderID: 9, CustomerID: 7, Status: order.StatusPendingPayment, PaymentStatus: "AUTHORIZED",
			Items: []pricing.Item{{SKUID: 77, Title: title, Quantity: 1, UnitPriceMinor: 100}}}
		md := details(st)
		var row string
		for _, line := range strings.Split(md, "\n") {
			if strings.HasPrefix(line, "| 77 |") {
				require.Empty(t, row, "%q: one row", title)
				row = line
			}
		}
		require.NotEmpty(t, row, "%q: its row is there, on one line", title)
		cells := strings.Split(row, " | ")
		require.Len(t, cells, 4, "%q: four cells: %s", title, row)
		cell := cells[1]
		assert.Empty(t, unescapedMarkdown(cell), "%q: every Markdown character escaped: %s", title, cell)
		want := strings.Map(func(r rune) rune {
			if r < ' ' || r == '\u2028' {
				return ' '
			}
			return r
		}, title)
		assert.Equal(t, want, unescape(cell), "%q: the title's own text, as the UI shows it", title)
		assert.NotContains(t, md, "{workflowId}", "no placeholder the UI would fill in")
	}
}

// TestDetails_ParkedStepError_Escaped: the error of a parked step is text too.
func TestDetails_ParkedStepError_Escaped(t *testing.T) {
	t.Parallel()
	st := OrderState{OrderID: 9, Status: order.StatusNeedsAttention, NeedsAttention: true,
		Attention: &Attention{Step: "capture", Error: "provider said <b>[no](https://x)</b>\nretry later"}}
	md := details(st)
	assert.Contains(t, md, `provider said \<b\>\[no\]\(https\:\/\/x\)\<\/b\> retry later`)
}
