// Package builds keeps a binary of the product for every build of its workflow code that a stack
// on this machine has run, finds the newest commit of a build in the repository's history and
// builds its binary there when none was kept, and runs the workers of earlier builds beside
// today's until Temporal reports each drained (Fleet). `make run` and `make cluster` release
// through it: a code change never strands an order waiting on the build it began on.
package builds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Binary is the name of a kept binary in its build's folder.
const Binary = "checkout"

// Store is a folder with one binary per build: <Dir>/<build id>/checkout, and beside it
// build.json saying where it came from.
type Store struct {
	Dir string
	// Repo is the git repository whose history a build missing here is built from ("": the
	// working directory's).
	Repo string
	// Out receives a line per binary built from history (nil: none).
	Out io.Writer
}

// Meta is a kept binary's build.json.
type Meta struct {
	BuildID string    `json:"buildId"`
	Source  string    `json:"source"` // "kept" (a stack ran it) or "history" (built from Commit)
	Commit  string    `json:"commit,omitempty"`
	SHA256  string    `json:"sha256"`
	At      time.Time `json:"at"`
}

// Path is where build id's binary is kept.
func (s Store) Path(id string) string { return filepath.Join(s.Dir, id, Binary) }

// Has says whether a binary of build id is kept.
func (s Store) Has(id string) bool {
	_, err := os.Stat(s.Path(id))
	return err == nil
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Keep stores binary as build id's, unless the very same binary is kept already (a build whose
// activities or API changed keeps its id: its binary is replaced). It returns the kept path.
func (s Store) Keep(id, binary string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("build id %q: letters, digits, '.', '_', '-'", id)
	}
	sum, err := fileSHA256(binary)
	if err != nil {
		return "", err
	}
	if m, err := s.Meta(id); err == nil && m.SHA256 == sum && s.Has(id) {
		return s.Path(id), nil
	}
	if err := s.install(id, binary); err != nil {
		return "", err
	}
	return s.Path(id), s.writeMeta(Meta{BuildID: id, Source: "kept", SHA256: sum, At: time.Now().UTC()})
}

// Meta reads build id's build.json.
func (s Store) Meta(id string) (Meta, error) {
	var m Meta
	raw, err := os.ReadFile(filepath.Join(s.Dir, id, "build.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(raw, &m)
}

func (s Store) writeMeta(m Meta) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.Dir, m.BuildID, "build.json"), raw, 0o644)
}

// install copies binary into id's folder, atomically: a process starting the kept binary never
// sees half of it.
func (s Store) install(id, binary string) error {
	in, err := os.Open(binary)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Join(s.Dir, id), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(s.Dir, id), ".checkout-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.Path(id))
}

// Ensure returns build id's binary: the kept one, or else one built from the newest commit of
// that build in the repository's history.
func (s Store) Ensure(ctx context.Context, id string) (string, error) {
	if s.Has(id) {
		return s.Path(id), nil
	}
	return s.BuildFromHistory(ctx, id)
}

// BuildFromHistory builds build id's binary from the newest commit of that build in the
// repository's history, in a git worktree of that commit, and keeps it.
func (s Store) BuildFromHistory(ctx context.Context, id string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("build id %q: letters, digits, '.', '_', '-'", id)
	}
	commit, err := NewestCommit(ctx, s.Repo, id)
	if err != nil {
		return "", err
	}
	if s.Out != nil {
		fmt.Fprintf(s.Out, "builds: building %s from commit %.12s of this repository (its binary was not kept)\n", id, commit)
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(s.Dir, ".src-"+id+"-")
	if err != nil {
		return "", err
	}
	defer func() {
		_, _ = s.git(context.WithoutCancel(ctx), "worktree", "remove", "--force", src)
		_ = os.RemoveAll(src)
		_, _ = s.git(context.WithoutCancel(ctx), "worktree", "prune")
	}()
	if _, err := s.git(ctx, "worktree", "add", "--detach", src, commit); err != nil {
		return "", err
	}
	out := filepath.Join(src, "bin", Binary)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/checkout")
	cmd.Dir = src
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s at %.12s: %v\n%s", id, commit, err, msg)
	}
	if err := s.install(id, out); err != nil {
		return "", err
	}
	sum, err := fileSHA256(s.Path(id))
	if err != nil {
		return "", err
	}
	return s.Path(id), s.writeMeta(Meta{BuildID: id, Source: "history", Commit: commit, SHA256: sum, At: time.Now().UTC()})
}

// namesFile holds the build id of the workflow code (workflows.BuildID).
const namesFile = "workflows/names.go"

var buildIDLine = regexp.MustCompile(`(?m)^const BuildID = "([^"]*)"`)

// BuildIDAt is the build id of the workflow code at commit ("" when it has none).
func BuildIDAt(ctx context.Context, repo, commit string) (string, error) {
	out, err := Store{Repo: repo}.git(ctx, "show", commit+":"+namesFile)
	if err != nil {
		return "", err
	}
	if m := buildIDLine.FindStringSubmatch(out); m != nil {
		return m[1], nil
	}
	return "", nil
}

// NewestCommit finds the newest commit, along the first parents of HEAD, whose workflow code is
// build id: the commit before the one that changed the build id from id, or HEAD itself.
func NewestCommit(ctx context.Context, repo, id string) (string, error) {
	st := Store{Repo: repo}
	out, err := st.git(ctx, "rev-list", "--first-parent", "HEAD", "--", namesFile)
	if err != nil {
		return "", fmt.Errorf("build %s's binary was not kept and cannot be built from history: %w", id, err)
	}
	changes := strings.Fields(out) // newest first: the commits that touched the names file
	later := "HEAD"                // the newest commit of the build being looked at
	for _, c := range changes {
		b, err := BuildIDAt(ctx, repo, c)
		if err != nil {
			return "", err
		}
		if b == id {
			return st.revParse(ctx, later)
		}
		// Everything from c (included) up to `later` is build b; before c comes c's parent.
		later = c + "^"
	}
	return "", fmt.Errorf("build %s is not in this repository's history: its binary was not kept (see docs/runbook.md, releasing)", id)
}

// PreviousBuild is the build released before the one at HEAD, and its newest commit.
func PreviousBuild(ctx context.Context, repo string) (id, commit string, err error) {
	st := Store{Repo: repo}
	head, err := BuildIDAt(ctx, repo, "HEAD")
	if err != nil {
		return "", "", err
	}
	out, err := st.git(ctx, "rev-list", "--first-parent", "HEAD", "--", namesFile)
	if err != nil {
		return "", "", err
	}
	for _, c := range strings.Fields(out) {
		b, err := BuildIDAt(ctx, repo, c+"^")
		if err != nil {
			continue // the first commit
		}
		if b != head && b != "" {
			commit, err := st.revParse(ctx, c+"^")
			return b, commit, err
		}
	}
	return "", "", fmt.Errorf("no build before %s in this repository's history", head)
}

func (s Store) revParse(ctx context.Context, rev string) (string, error) {
	out, err := s.git(ctx, "rev-parse", "--verify", rev+"^{commit}")
	return strings.TrimSpace(out), err
}

func (s Store) git(ctx context.Context, args ...string) (string, error) {
	if s.Repo != "" {
		args = append([]string{"-C", s.Repo}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Info is what a binary says of itself (`checkout version --json`).
type Info struct {
	BuildID string `json:"buildId"`
	// TemporalTLS: it reaches Temporal over mutual TLS; without, a cluster gives it its legacy
	// proxy.
	TemporalTLS bool `json:"temporalTLS"`
}

// Describe asks a binary for its build and what it can do. A binary of a release before
// `checkout version` cannot say: ErrNoVersion, and its build id must be given.
func Describe(ctx context.Context, binary string) (Info, error) {
	out, err := exec.CommandContext(ctx, binary, "version", "--json").Output()
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w (%v)", binary, ErrNoVersion, err)
	}
	var v Info
	if err := json.Unmarshal(out, &v); err != nil || v.BuildID == "" {
		return Info{}, errors.Join(fmt.Errorf("%s version --json: %q", binary, out), err)
	}
	return v, nil
}

// ErrNoVersion: the binary is of a release before `checkout version`.
var ErrNoVersion = errors.New("it cannot say its build (a release before `checkout version`): give its build id")

// IDOf asks a binary for its build id.
func IDOf(ctx context.Context, binary string) (string, error) {
	v, err := Describe(ctx, binary)
	return v.BuildID, err
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
