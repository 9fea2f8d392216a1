package architecture_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/order"
)

// TestDocs_RunbookNamesEveryFailureCode: the runbook's failureCode paragraph says what each code an
// order ends with means (order.Endings), and names no other: an ending added to one and not the
// other fails here.
func TestDocs_RunbookNamesEveryFailureCode(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/runbook.md")
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "\n`failureCode`: ")
	require.NotEqual(t, -1, start, "docs/runbook.md has no failureCode paragraph")
	paragraph := doc[start+1:]
	if end := strings.Index(paragraph, "\n\n"); end != -1 {
		paragraph = paragraph[:end]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([A-Z]+(?:_[A-Z]+)+|[A-Z]{4,})`").FindAllStringSubmatch(paragraph, -1) {
		named[m[1]] = true
	}
	delete(named, "PARKED_GIVE_UP_AFTER") // a setting the paragraph refers to
	for _, c := range order.Endings() {
		assert.True(t, named[string(c)], "docs/runbook.md's failureCode paragraph does not say what %s means", c)
		delete(named, string(c))
	}
	assert.Empty(t, named, "docs/runbook.md's failureCode paragraph names codes no order ends with")
}
