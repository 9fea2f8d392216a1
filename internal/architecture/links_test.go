package architecture_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocs_RelativeLinksResolve: every relative link of README.md, CONTRIBUTING.md and docs/*.md
// names a file or folder of the repository and, when it names a section (#anchor) of a Markdown
// file, a heading of that file, as GitHub makes its anchors.
func TestDocs_RelativeLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{"README.md", "CONTRIBUTING.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	for _, d := range docs {
		files = append(files, must(filepath.Rel(root, d)))
	}
	anchors := map[string]map[string]bool{} // by file, relative to root
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		raw, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		anchors[file] = headingAnchors(string(raw))
		return anchors[file]
	}
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		for _, l := range markdownLinks(string(raw)) {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Clean(filepath.Join(filepath.Dir(file), path))
				if strings.HasPrefix(resolved, "..") {
					t.Errorf("%s:%d: %q leaves the repository", file, l.line, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
					t.Errorf("%s:%d: %q: no such file or folder (%s)", file, l.line, target, resolved)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") {
				assert.True(t, anchorsOf(resolved)[anchor], "%s:%d: %q: %s has no heading #%s", file, l.line, target, resolved, anchor)
			}
		}
	}
	assert.Greater(t, checked, 100, "too few links found: is the link pattern still right?")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

type link struct {
	target string
	line   int
}

// linkPattern is an inline Markdown link or image, [text](target) or ![alt](target), with an
// optional "title".
var linkPattern = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// markdownLinks are a document's inline links outside fenced code blocks and code spans; a link's
// text may run over lines.
func markdownLinks(doc string) []link {
	lines := strings.Split(doc, "\n")
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		lines[i] = stripCodeSpans(line)
	}
	text := strings.Join(lines, "\n")
	var out []link
	for _, m := range linkPattern.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, link{target: text[m[2]:m[3]], line: strings.Count(text[:m[0]], "\n") + 1})
	}
	return out
}

// stripCodeSpans blanks `code spans`, where brackets are not links.
func stripCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "`")
}

// headingAnchors are the anchors GitHub gives a document's headings: lower case, every character
// but letters, digits, spaces, hyphens and underscores dropped, spaces made hyphens, and -1, -2 …
// after a repeated one.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
