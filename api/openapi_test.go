package api_test

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
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

// TestOpenAPI_NamesEveryCodeWithItsStatus: every code the API answers (internal/problem, with its
// status from api/errors.go; an internal code is answered as INTERNAL or UNAVAILABLE) is named in api/openapi.yaml by a response of that status, a shared
// response of it, or the document's description ("413 `PAYLOAD_TOO_LARGE`").
func TestOpenAPI_NamesEveryCodeWithItsStatus(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	type response struct {
		Description string `yaml:"description"`
		Ref         string `yaml:"$ref"`
	}
	var doc struct {
		Info struct {
			Description string `yaml:"description"`
		} `yaml:"info"`
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Responses map[string]response `yaml:"responses"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	// said holds, per status, the descriptions that answer with it.
	said := map[string][]string{}
	for _, ops := range doc.Paths {
		for _, node := range ops {
			var op struct {
				Responses map[string]response `yaml:"responses"`
			}
			if node.Decode(&op) != nil {
				continue // a path's parameters, not an operation
			}
			for status, r := range op.Responses {
				if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
					r = doc.Components.Responses[name]
				}
				said[status] = append(said[status], r.Description)
			}
		}
	}
	for _, m := range regexp.MustCompile("([0-9]{3}) `([A-Z_]+)`").FindAllStringSubmatch(doc.Info.Description, -1) {
		said[m[1]] = append(said[m[1]], m[2])
	}
	for _, code := range problem.Codes() {
		if code.Kind() == problem.KindEnded {
			continue // an order's failureCode: TestOpenAPI_FailureCodesAreTheOrdersEndings
		}
		if code.Internal() {
			// Never answered as it is: as INTERNAL or UNAVAILABLE, named with their statuses.
			assert.Contains(t, []int{500, 503}, api.StatusOf(code), code)
			continue
		}
		if api.AnsweredAs(code) != code {
			continue // answered as another code, named with its status
		}
		status := strconv.Itoa(api.StatusOf(code))
		named := regexp.MustCompile(`\b` + string(code) + `\b`)
		assert.True(t, slices.ContainsFunc(said[status], named.MatchString),
			"openapi.yaml names %s nowhere with status %s", code, status)
	}
}

// TestOpenAPI_ErrorCodesAreTheVocabularys: the Error schema's code enum is every code a request may
// be answered with (internal/problem's answered codes, as AnsweredAs answers them), in the order
// of their declarations: a code added to one and not the other fails here.
func TestOpenAPI_ErrorCodesAreTheVocabularys(t *testing.T) {
	t.Parallel()
	var want []string
	for _, code := range problem.Codes() {
		if code.Answered() && api.AnsweredAs(code) == code {
			want = append(want, string(code))
		}
	}
	assert.Equal(t, want, schemaEnum(t, "Error", "code"),
		"api/openapi.yaml's Error.code enum: [%s]", strings.Join(want, ", "))
}

// schemaEnum is the enum of one of openapi.yaml's schemas, or of one of its properties.
func schemaEnum(t *testing.T, schema, property string) []string {
	t.Helper()
	raw, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	type enum struct {
		Enum []string `yaml:"enum"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				enum       `yaml:",inline"`
				Properties map[string]enum `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	if property == "" {
		return doc.Components.Schemas[schema].Enum
	}
	return doc.Components.Schemas[schema].Properties[property].Enum
}

// TestOpenAPI_FailureCodesAreTheOrdersEndings: the FailureCode schema's enum is every code an
// order ends with (order.Endings), in its order.
func TestOpenAPI_FailureCodesAreTheOrdersEndings(t *testing.T) {
	t.Parallel()
	var want []string
	for _, c := range order.Endings() {
		want = append(want, string(c))
	}
	assert.Equal(t, want, schemaEnum(t, "FailureCode", ""),
		"api/openapi.yaml's FailureCode enum: [%s]", strings.Join(want, ", "))
}
