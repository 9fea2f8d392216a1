package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// TestRelease_MakeRunAcrossABuild_WaitingOrdersEndAsTheShopperChose is the walk-through of a
// release on `make run`: the previous build's `dev` (built from its newest commit in this
// repository) takes two 3-D Secure orders and stops while they wait; today's `checkout-dev dev` starts
// on the same data folder and finds them pinned to a build it does not run. It builds that
// build's binary from history and runs its worker beside today's; the shopper approves one order
// and declines the other, and each ends as chosen, every task of both on the previous build,
// while a new order runs on today's. The previous build's binary is taken out of the data folder
// first, as for a build released before binaries were kept.
func TestRelease_MakeRunAcrossABuild_WaitingOrdersEndAsTheShopperChose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	prev, _, err := builds.PreviousBuild(ctx, repo)
	require.NoError(t, err)
	oldBin, err := builds.Store{Dir: t.TempDir(), Repo: repo}.BuildFromHistory(ctx, prev)
	require.NoError(t, err)
	oldDev := devOf(t, repo, prev, oldBin)
	newBin := buildBinary(t)

	data := t.TempDir()
	pg, tp := freePort(t), freePort(t)
	api := freeAddr(t)
	env := append(cleanEnv(), "DATA_DIR="+data, "PG_PORT="+strconv.Itoa(pg), "TEMPORAL_PORT="+strconv.Itoa(tp),
		"TEMPORAL_UI_PORT=0", "HTTP_ADDR="+api, "METRICS_ADDR="+freeAddr(t), "HOLD_TTL=3m", "LOG_LEVEL=warn",
		"NATS_PORT="+strconv.Itoa(freePort(t)), "NATS_MONITOR_PORT="+strconv.Itoa(freePort(t)))
	base := "http://" + api

	old := startDev(t, oldDev, env)
	waitFor(t, base+"/readyz", func(got) bool { return true })
	token := func(user int) string {
		c := exec.Command(newBin, "token", "--user", strconv.Itoa(user), "--role", "shopper")
		c.Env = env // the data folder's development secret
		out, err := c.Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	approve := placeDev(t, base, token(7), "tok_3ds")
	decline := placeDev(t, base, token(8), "tok_3ds")
	old.stop(t)
	// As after a release from before builds were kept: the previous build's binary is not in the
	// data folder, so today's dev must build it from the repository's history.
	require.NoError(t, os.RemoveAll(filepath.Join(data, "builds", prev)))

	today := startDev(t, buildHarness(t), env)
	waitFor(t, base+"/readyz", func(got) bool { return true })

	require.Equal(t, http.StatusOK, postForm(t, approve.redirect, "approve"))
	require.Equal(t, http.StatusOK, postForm(t, decline.redirect, "decline"))
	assert.Equal(t, "CONFIRMED", waitDevFinal(t, base, approve, 3*time.Minute), "the approved order is confirmed")
	assert.Equal(t, "FAILED", waitDevFinal(t, base, decline, time.Minute), "the declined order failed")
	fresh := placeDev(t, base, token(7), "tok_ok")
	assert.Equal(t, "CONFIRMED", waitDevFinal(t, base, fresh, time.Minute))
	today.stop(t)
	assert.Contains(t, today.logs.String(), "build "+prev+" is", "today's dev ran the previous build's worker")
	assert.Contains(t, today.logs.String(), "building "+prev+" from commit", "its binary came from history")
}

// devOf is what runs `dev` for build, whose product binary bin was built from history: bin itself
// when that build's newest commit has no harness binary of its own (cmd/checkout-dev), else that
// commit's checkout-dev, built beside bin, which it keeps as its build's.
func devOf(t *testing.T, repo, build, bin string) string {
	t.Helper()
	commit, err := builds.NewestCommit(context.Background(), repo, build)
	require.NoError(t, err)
	if exec.Command("git", "-C", repo, "cat-file", "-e", commit+":cmd/checkout-dev").Run() != nil {
		return bin
	}
	src := filepath.Join(t.TempDir(), "src")
	out, err := exec.Command("git", "-C", repo, "worktree", "add", "--detach", src, commit).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("git", "-C", repo, "worktree", "remove", "--force", src).Run() })
	harness := filepath.Join(filepath.Dir(bin), "checkout-dev")
	cmd := exec.Command("go", "build", "-o", harness, "./cmd/checkout-dev")
	cmd.Dir = src
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return harness
}

// devProcess is a `dev` run as `make run` runs it.
type devProcess struct {
	cmd  *exec.Cmd
	logs *bytes.Buffer
	done bool
}

func startDev(t *testing.T, bin string, env []string) *devProcess {
	t.Helper()
	c := exec.Command(bin, "dev")
	c.Dir = ".."
	// No Jaeger: its fixed ports are make run's.
	c.Env = append(env, "JAEGER_UI_PORT=0")
	p := &devProcess{cmd: c, logs: &bytes.Buffer{}}
	c.Stdout, c.Stderr = p.logs, p.logs
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, c.Start())
	t.Cleanup(func() {
		if !p.done {
			_ = c.Process.Signal(os.Interrupt)
			_ = c.Wait()
		}
		if t.Failed() {
			t.Logf("%s dev's output:\n%s", bin, p.logs.String())
		}
	})
	return p
}

// stop is Ctrl-C: everything dev started stops with it.
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	_ = p.cmd.Wait()
	p.done = true
}

// devOrder is an order placed through a dev stack's API.
type devOrder struct {
	token    string
	id       int64
	redirect string
}

// placeDev puts SKU 71 in the shopper's cart and orders it with the payment token.
func placeDev(t *testing.T, base, token, payment string) devOrder {
	t.Helper()
	call := func(method, path string, body any, header ...string) map[string]any {
		var r io.Reader
		if body != nil {
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			r = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(method, base+path, r)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, raw)
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		return out
	}
	call(http.MethodPut, "/api/v1/cart/items/71", map[string]any{"sellerId": 42, "quantity": 1})
	pv := call(http.MethodPost, "/api/v1/checkout/preview", nil)["priceVersion"]
	addrs := call(http.MethodGet, "/api/v1/addresses", nil)["addresses"].([]any)
	require.NotEmpty(t, addrs, "the demo shoppers have addresses")
	addr := addrs[0].(map[string]any)["addressId"]
	o := call(http.MethodPost, "/api/v1/orders", map[string]any{"priceVersion": pv, "addressId": addr,
		"paymentMethodToken": payment}, "Idempotency-Key", "walk-"+randomHex(8))
	out := devOrder{token: token, id: int64(o["orderId"].(float64))}
	if p, ok := o["payment"].(map[string]any); ok {
		out.redirect, _ = p["redirectUrl"].(string)
	}
	return out
}

// postForm answers a 3-D Secure page as its buttons do.
func postForm(t *testing.T, page, result string) int {
	t.Helper()
	require.NotEmpty(t, page, "the order has a 3-D Secure page")
	resp, err := http.PostForm(page, url.Values{"result": {result}})
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// waitDevFinal polls the order until it leaves PENDING_PAYMENT, and returns its status.
func waitDevFinal(t *testing.T, base string, o devOrder, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	status := ""
	for time.Now().Before(deadline) {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/v1/orders/%d", base, o.id), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+o.token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var body struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			status = body.Status
			if status != "" && status != "PENDING_PAYMENT" {
				return status
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return status + " (still, after " + within.String() + ")"
}

func freePort(t *testing.T) int {
	p, err := pgserver.FreePort()
	require.NoError(t, err)
	return p
}
