package builds_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/workflows"
)

// repoRoot is the repository these tests run in.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "the tests run inside the repository")
	return strings.TrimSpace(string(out))
}

// TestNewestCommit_OfEachBuild_IsTheLastCommitBeforeTheNextBuild: the newest commit of a build is
// the one just before the commit that changed the build id, whose code is still that build's; the
// current build's is HEAD.
func TestNewestCommit_OfEachBuild_IsTheLastCommitBeforeTheNextBuild(t *testing.T) {
	ctx := context.Background()
	repo := repoRoot(t)
	head, err := builds.NewestCommit(ctx, repo, workflows.BuildID)
	require.NoError(t, err)
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(out)), head, "the current build's newest commit is HEAD")

	prev, commit, err := builds.PreviousBuild(ctx, repo)
	require.NoError(t, err)
	require.NotEqual(t, workflows.BuildID, prev)
	newest, err := builds.NewestCommit(ctx, repo, prev)
	require.NoError(t, err)
	assert.Equal(t, commit, newest)
	id, err := builds.BuildIDAt(ctx, repo, newest)
	require.NoError(t, err)
	assert.Equal(t, prev, id, "the newest commit of %s has its code", prev)
	child, err := exec.Command("git", "-C", repo, "rev-list", "--first-parent", "--reverse", "--ancestry-path", newest+"..HEAD").Output()
	require.NoError(t, err)
	next := strings.Fields(string(child))
	require.NotEmpty(t, next)
	id, err = builds.BuildIDAt(ctx, repo, next[0])
	require.NoError(t, err)
	assert.NotEqual(t, prev, id, "the commit after it is another build's")

	_, err = builds.NewestCommit(ctx, repo, "no-such-build")
	assert.ErrorContains(t, err, "not in this repository's history")
}

// TestStore_KeepsABinaryOncePerContent: keeping the same binary again changes nothing; another
// binary of the same build replaces it.
func TestStore_KeepsABinaryOncePerContent(t *testing.T) {
	dir := t.TempDir()
	s := builds.Store{Dir: filepath.Join(dir, "store")}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, exec.Command("cp", "/bin/true", a).Run())
	require.NoError(t, exec.Command("cp", "/bin/false", b).Run())
	p, err := s.Keep("saga-x", a)
	require.NoError(t, err)
	m1, err := s.Meta("saga-x")
	require.NoError(t, err)
	_, err = s.Keep("saga-x", a)
	require.NoError(t, err)
	m2, err := s.Meta("saga-x")
	require.NoError(t, err)
	assert.Equal(t, m1, m2, "the same binary is kept once")
	_, err = s.Keep("saga-x", b)
	require.NoError(t, err)
	m3, err := s.Meta("saga-x")
	require.NoError(t, err)
	assert.NotEqual(t, m1.SHA256, m3.SHA256, "another binary of the build replaces it")
	assert.Error(t, exec.Command(p).Run(), "the kept binary is the new one (false)")
	_, err = s.Keep("../escape", a)
	assert.Error(t, err)
}
