package api_test

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestOpenAPI_DescribesEveryRoute keeps api/openapi.yaml true: every route the server has is
// documented with its method, and the document names no route that does not exist.
func TestOpenAPI_DescribesEveryRoute(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true}
	var documented []string
	for path, ops := range doc.Paths {
		for m := range ops {
			if methods[m] {
				documented = append(documented, strings.ToUpper(m)+" "+path)
			}
		}
	}

	h := newHarness(t, nil)
	param := regexp.MustCompile(`:([A-Za-z]+)`)
	var served []string
	for _, r := range h.e.Routes() {
		if strings.HasPrefix(r.Name, "github.com/labstack/echo") || r.Method == "echo_route_any" {
			continue
		}
		served = append(served, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	sort.Strings(documented)
	sort.Strings(served)
	assert.Equal(t, served, documented)
}
