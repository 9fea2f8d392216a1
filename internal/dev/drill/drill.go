// Package drill is the upgrade drill (`make upgrade-drill`): `make cluster`'s shape running the
// previous release of the workflow code, orders left in every state an order waits in, today's
// build released into it with `checkout-dev release`, then each order finished as a shopper, the
// provider and support would. It fails on any order not ended as its scenario says, on the
// previous build not drained (its workers still running), and on any audit violation.
package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/workflows"
)

// Options say what the drill releases into what.
type Options struct {
	// Repo is the repository whose history holds the previous release; Tools the folder of
	// temporal-server, temporal-sql-tool and temporal-ui-server (the repository's bin/).
	Repo, Tools string
	// Today is today's checkout binary, the release; Harness today's checkout-dev, which runs the
	// cluster and the release ("": the one beside Today).
	Today, Harness string
	// Previous is the build released before today's ("": the one before HEAD's in the
	// repository's history), and PreviousBinary its binary ("": the one kept in Tools/builds, or
	// built there from the newest commit of that build).
	Previous, PreviousBinary string
	// Short runs one worker and one API replica, with no ramp (make test's form).
	Short bool
	Out   io.Writer
}

// Row is one order of the drill and how it ended.
type Row struct {
	Scenario, Workflow string
	Want, Got          string
	// Builds are the builds whose workers ran the order's workflow tasks, in order.
	Builds []string
	OK     bool
}

// Result is what the drill found.
type Result struct {
	Previous, Today string
	Rows            []Row
	// Drained: Temporal reported the previous build drained, and its workers were stopped.
	Drained, Stopped bool
	AuditOK          bool
	Audit            string
	// Builds and Move are what `checkout builds` and `checkout builds move --dry-run` printed
	// right after the release.
	Builds, Move string
	Elapsed      time.Duration
}

// OK says whether every order ended as its scenario says, the previous build drained and its
// workers stopped, and the audit found nothing.
func (r Result) OK() bool {
	for _, row := range r.Rows {
		if !row.OK {
			return false
		}
	}
	return len(r.Rows) > 0 && r.Drained && r.Stopped && r.AuditOK && r.BuildsShown()
}

// BuildsShown: `checkout builds` showed the previous build draining with open runs beside today's
// current one.
func (r Result) BuildsShown() bool {
	var prevDraining, todayCurrent bool
	for _, line := range strings.Split(r.Builds, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == r.Previous && f[1] == "draining" && f[2] != "0":
			prevDraining = true
		case len(f) >= 2 && f[0] == r.Today && f[1] == "current":
			todayCurrent = true
		}
	}
	return prevDraining && todayCurrent
}

// WriteTable prints the result.
func (r Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nupgrade drill: %s -> %s (%s)\n\n", r.Previous, r.Today, r.Elapsed.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tWORKFLOW\tWANT\tGOT\tRAN ON\tOK")
	for _, row := range r.Rows {
		ok := "ok"
		if !row.OK {
			ok = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.Scenario, row.Workflow, row.Want, row.Got,
			strings.Join(row.Builds, " then "), ok)
	}
	_ = tw.Flush()
	yes := func(b bool) string { return map[bool]string{true: "yes", false: "NO"}[b] }
	fmt.Fprintf(w, "\ncheckout builds showed %s draining beside %s current: %s\n", r.Previous, r.Today, yes(r.BuildsShown()))
	fmt.Fprintf(w, "%s drained: %s; its workers stopped: %s; audit clean: %s\n", r.Previous, yes(r.Drained),
		yes(r.Stopped), yes(r.AuditOK))
	if !r.AuditOK {
		fmt.Fprintln(w, r.Audit)
	}
}

// queryWindow is how long the drill's cluster keeps a drained build's workers for queries.
const queryWindow = 5 * time.Second

// Run runs the drill.
func Run(ctx context.Context, o Options) (res Result, err error) {
	began := time.Now()
	defer func() { res.Elapsed = time.Since(began) }()
	say := func(format string, a ...any) { fmt.Fprintf(o.Out, "drill: "+format+"\n", a...) }
	if o.Previous == "" {
		if o.Previous, _, err = builds.PreviousBuild(ctx, o.Repo); err != nil {
			return res, err
		}
	}
	today, err := builds.Describe(ctx, o.Today)
	if err != nil {
		return res, err
	}
	res.Previous, res.Today = o.Previous, today.BuildID
	if o.Previous == today.BuildID {
		return res, fmt.Errorf("today's build is %s, the previous release's too: nothing to release", today.BuildID)
	}
	if o.Harness == "" {
		o.Harness = filepath.Join(filepath.Dir(o.Today), "checkout-dev")
	}
	if o.PreviousBinary == "" {
		// Built from the release's own commit every time: a binary kept under the same build id
		// may come from any commit of that build.
		dir, err := os.MkdirTemp("", "checkout-drill-previous-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		if o.PreviousBinary, err = (builds.Store{Dir: dir, Repo: o.Repo, Out: o.Out}).BuildFromHistory(ctx, o.Previous); err != nil {
			return res, err
		}
	}
	apis, workers := "2", "2"
	if o.Short {
		apis, workers = "1", "1"
	}
	say("starting the cluster on build %s (%s API replicas, %s workers)", o.Previous, apis, workers)
	stack, err := benchkit.StartClusterWith(ctx, benchkit.ClusterSpec{Binary: o.Harness, Tools: o.Tools, Prefix: "checkout-drill-",
		Env: append(os.Environ(),
			// Long enough for every waiting order to outlast the release; an extension at once.
			"HOLD_TTL=10m", "HOLD_EXTEND_WINDOW=10m", "HOLD_EXTEND_BY=5m",
			// A step whose provider is down parks the order soon.
			"STEP_RETRY_WINDOW=5s",
			"BUILDS_QUERY_WINDOW="+queryWindow.String()),
		Args: []string{"--binary", o.PreviousBinary, "--build-id", o.Previous, "--apis", apis, "--workers", workers,
			"--history-shards", "4",
			// Drainage seen within seconds, as the dev server does (a cluster keeps minutes).
			"--dynamic-config", `matching.wv.VersionDrainageStatusRefreshInterval="2s"`,
			"--dynamic-config", `matching.wv.VersionDrainageStatusVisibilityGracePeriod="2s"`}})
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil || !res.OK() {
			stack.Keep = true // its logs say why
			say("the cluster's folder, with its logs, is kept: %s", stack.Dir)
		}
		stack.Stop()
	}()
	d, err := newDriver(ctx, stack, say)
	if err != nil {
		return res, err
	}
	defer d.close()

	orders, err := d.leaveWaiting(ctx)
	if err != nil {
		return res, fmt.Errorf("leaving orders waiting on %s: %w", o.Previous, err)
	}
	for _, ord := range orders {
		state, err := d.state(ctx, ord)
		if err != nil {
			return res, err
		}
		if state != "PENDING_PAYMENT" && state != "NEEDS_ATTENTION" {
			return res, fmt.Errorf("%s: order %d is %s before the release: it must wait across it", ord.scenario, ord.id, state)
		}
	}
	say("releasing build %s into the cluster (checkout-dev release)", today.BuildID)
	args := []string{"release", "--dir", stack.Dir, "--binary", o.Today}
	if !o.Short {
		args = append(args, "--ramp", "20", "--ramp-step", "10s")
	}
	rel := exec.CommandContext(ctx, o.Harness, args...)
	var relOut bytes.Buffer
	rel.Stdout, rel.Stderr = io.MultiWriter(&relOut, o.Out), io.MultiWriter(&relOut, o.Out)
	if err := rel.Run(); err != nil {
		return res, fmt.Errorf("checkout-dev release: %w", err)
	}
	// What ops see of the builds now, and which waiting runs could move to today's build.
	if res.Builds, err = d.checkout(ctx, o.Today, "builds"); err != nil {
		return res, fmt.Errorf("checkout builds: %w\n%s", err, res.Builds)
	}
	if res.Move, err = d.checkout(ctx, o.Today, "builds", "move", "--from", o.Previous, "--dry-run"); err != nil {
		return res, fmt.Errorf("checkout builds move: %w\n%s", err, res.Move)
	}
	fmt.Fprintf(o.Out, "\n$ checkout builds\n%s\n$ checkout builds move --from %s --dry-run\n%s\n", res.Builds, o.Previous, res.Move)
	if err := d.finish(ctx, orders); err != nil {
		return res, fmt.Errorf("finishing the orders on %s: %w", today.BuildID, err)
	}
	for _, ord := range orders {
		res.Rows = append(res.Rows, d.outcome(ctx, ord))
	}
	res.Drained, res.Stopped = d.drainedAndStopped(ctx, o.Previous)
	res.Audit, res.AuditOK = d.audit(ctx, o.Today)
	return res, nil
}

// driver acts on the drill's cluster as shoppers, ops, support and the provider do.
type driver struct {
	stack *benchkit.Stack
	hc    *http.Client
	tc    client.Client
	pool  *pgxpool.Pool
	keys  auth.Keys
	say   func(string, ...any)
	// opsToken is oscar's, from the identity provider (asOps).
	opsToken string
}

func newDriver(ctx context.Context, stack *benchkit.Stack, say func(string, ...any)) (*driver, error) {
	cfg, err := config.Load(func(k string) string {
		if k == "AUTH_JWT_SECRET" {
			return stack.Secret
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	d := &driver{stack: stack, hc: &http.Client{Timeout: 60 * time.Second}, keys: cfg.AuthKeys(), say: say}
	d.tc, err = client.DialContext(ctx, client.Options{HostPort: stack.Temporal, DataConverter: stack.DataConverter,
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{TLS: stack.TemporalTLS}})
	if err != nil {
		return nil, err
	}
	if d.pool, err = pgxpool.New(ctx, stack.DatabaseURL); err != nil {
		d.tc.Close()
		return nil, err
	}
	return d, nil
}

func (d *driver) close() {
	d.pool.Close()
	d.tc.Close()
}

// shopper is a shopper's token: from the cluster's identity provider, whose tokens alone today's
// API takes (the previous build takes them too); minted where the stack has none.
func (d *driver) shopper(ctx context.Context, user int64) (string, error) {
	if d.stack.Tokens != nil {
		return d.stack.Tokens.Shopper(ctx, user)
	}
	return d.token(auth.Principal{UserID: user, Role: auth.RoleShopper}), nil
}

func (d *driver) token(p auth.Principal) string {
	t, err := d.keys.Mint(p, time.Hour)
	if err != nil {
		panic(err) // the cluster's own secret
	}
	return t
}

// answer is an HTTP answer of the API.
type answer struct {
	status int
	body   map[string]any
	raw    string
}

func (d *driver) call(ctx context.Context, method, path, token string, body any, header ...string) (answer, error) {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.stack.Base+path, r)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a, nil
}

// must is call that wants a 2xx answer.
func (d *driver) must(ctx context.Context, method, path, token string, body any, header ...string) (answer, error) {
	a, err := d.call(ctx, method, path, token, body, header...)
	if err == nil && a.status >= 300 {
		err = fmt.Errorf("%s %s: %d %s", method, path, a.status, a.raw)
	}
	return a, err
}

// order is one order of the drill.
type order struct {
	scenario, want string
	user           int64
	token, key     string
	id             int64
	redirect       string
	// lineCancel is the line cancellation's request id (the line-cancel scenario).
	lineCancel string
}

func (o order) workflowID() string {
	if o.lineCancel != "" {
		return workflows.LineCancelWorkflowID(o.id, o.lineCancel)
	}
	return workflows.OrderWorkflowID(o.user, o.key)
}

// place orders SKU sku for a new shopper with the payment token.
func (d *driver) place(ctx context.Context, scenario, want string, user, sku int64, payment string) (order, error) {
	o := order{scenario: scenario, want: want, user: user, key: fmt.Sprintf("drill-%s-%d", scenario, time.Now().UnixNano())}
	var err error
	if o.token, err = d.shopper(ctx, user); err != nil {
		return o, err
	}
	addr, err := d.must(ctx, http.MethodPost, "/api/v1/addresses", o.token,
		map[string]any{"city": "Istanbul", "line1": "Drill Sk. 1", "lat": 41.01, "lon": 28.97})
	if err != nil {
		return o, err
	}
	if _, err := d.must(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", sku), o.token,
		map[string]any{"sellerId": 42, "quantity": 1}); err != nil {
		return o, err
	}
	pv, err := d.must(ctx, http.MethodPost, "/api/v1/checkout/preview", o.token, nil)
	if err != nil {
		return o, err
	}
	a, err := d.must(ctx, http.MethodPost, "/api/v1/orders", o.token, map[string]any{"priceVersion": pv.body["priceVersion"],
		"addressId": addr.body["addressId"], "paymentMethodToken": payment}, "Idempotency-Key", o.key)
	if err != nil {
		return o, err
	}
	id, _ := a.body["orderId"].(float64)
	o.id = int64(id)
	if p, ok := a.body["payment"].(map[string]any); ok {
		o.redirect, _ = p["redirectUrl"].(string)
	}
	d.say("%-22s order %d placed: %s", scenario, o.id, a.raw)
	return o, nil
}

// faults sets the payment simulator's faults through the ops API (zero fields clear them).
func (d *driver) faults(ctx context.Context, f map[string]float64) error {
	a, err := d.asOps(ctx, http.MethodPut, "/api/v1/ops/payment-faults", f)
	if err == nil && a.status >= 300 {
		err = fmt.Errorf("payment faults: %d %s", a.status, a.raw)
	}
	return err
}

// asOps calls the ops API as the API in front takes ops: a build that verifies the identity
// provider's tokens takes ops only from it (oscar, signed in through the cluster's UI), and
// refuses the shared secret's with 401; an earlier build knows only the shared secret.
func (d *driver) asOps(ctx context.Context, method, path string, body any, header ...string) (answer, error) {
	if d.opsToken == "" {
		tok, err := cluster.StaffToken(ctx, d.stack.Dir, d.stack.Ports, "oscar")
		if err != nil {
			return answer{}, fmt.Errorf("ops' sign-in: %w", err)
		}
		d.opsToken = tok
	}
	a, err := d.call(ctx, method, path, d.opsToken, body, header...)
	if err != nil || a.status != http.StatusUnauthorized {
		return a, err
	}
	return d.call(ctx, method, path, d.token(auth.Principal{UserID: 990, Role: auth.RoleOps}), body, header...)
}

// threeDS answers an order's 3-D Secure page as its buttons do.
func (d *driver) threeDS(ctx context.Context, o order, result string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.redirect, strings.NewReader(url.Values{"result": {result}}.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("3-D Secure %s for order %d: %d", result, o.id, resp.StatusCode)
	}
	return nil
}

// scalar reads one value from the cluster's database.
func (d *driver) scalar(ctx context.Context, sql string, args ...any) (string, error) {
	var v *string
	err := d.pool.QueryRow(ctx, sql, args...).Scan(&v)
	if v == nil {
		return "", err
	}
	return *v, err
}

// waitFor polls cond until it holds.
func waitFor(ctx context.Context, within time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return errors.Join(fmt.Errorf("%s: not within %s", what, within), last)
}

func (d *driver) orderStatus(ctx context.Context, id int64) (string, error) {
	return d.scalar(ctx, `SELECT status::text FROM orders WHERE id = $1`, id)
}

// state is the order's status, or for a line cancellation, its state.
func (d *driver) state(ctx context.Context, o order) (string, error) {
	if o.lineCancel != "" {
		return d.lineCancelState(ctx, o)
	}
	return d.orderStatus(ctx, o.id)
}

// lineCancelState is the line cancellation's state as the API shows it to staff.
func (d *driver) lineCancelState(ctx context.Context, o order) (string, error) {
	return d.scalar(ctx, `SELECT CASE WHEN announced_at IS NOT NULL THEN 'DONE' WHEN attention IS NOT NULL THEN 'NEEDS_ATTENTION'
		WHEN refunded_at IS NOT NULL THEN 'REFUNDED' ELSE 'RECORDED' END FROM line_cancellations WHERE order_id = $1 AND request_id = $2`,
		o.id, o.lineCancel)
}

// leaveWaiting leaves an order in each state an order waits in, on the previous build.
func (d *driver) leaveWaiting(ctx context.Context) ([]order, error) {
	user := time.Now().Unix()%1_000_000*10 + 1_000_000
	next := func() int64 { user++; return user }
	var out []order
	add := func(o order, err error) error {
		if err == nil {
			out = append(out, o)
		}
		return err
	}
	// Waiting for 3-D Secure: to be approved, declined, and approved after the hold is extended.
	if err := add(d.place(ctx, "3ds-approve", "CONFIRMED", next(), 72, "tok_3ds")); err != nil {
		return nil, err
	}
	if err := add(d.place(ctx, "3ds-decline", "FAILED", next(), 73, "tok_3ds")); err != nil {
		return nil, err
	}
	ext, err := d.place(ctx, "hold-extended", "CONFIRMED", next(), 74, "tok_3ds")
	if err := add(ext, err); err != nil {
		return nil, err
	}
	if _, err := d.must(ctx, http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/extend-hold", ext.id), ext.token, nil); err != nil {
		return nil, err
	}
	d.say("%-22s order %d: hold extended", ext.scenario, ext.id)
	parked, err := d.place(ctx, "parked-after-confirm", "CONFIRMED", next(), 75, "tok_3ds")
	if err := add(parked, err); err != nil {
		return nil, err
	}
	// A confirmed order whose line is cancelled while the provider refuses its refund.
	cancelled, err := d.place(ctx, "line-cancel-parked", "DONE", next(), 76, "tok_ok")
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, time.Minute, "line-cancel order confirmed", func() (bool, error) {
		s, err := d.orderStatus(ctx, cancelled.id)
		return s == "CONFIRMED", err
	}); err != nil {
		return nil, err
	}

	// The provider refuses the refund: the intent is held in a state it refunds nothing from (as
	// a provider does for a payment under dispute), set in the simulator's own record. The
	// cancellation parks for support, retrying nothing by itself.
	if _, err := d.pool.Exec(ctx, `UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE order_id = $1`, cancelled.id); err != nil {
		return nil, err
	}
	cancelled.lineCancel = "drill-cancel-" + strconv.FormatInt(cancelled.id, 10)
	a, err := d.asOps(ctx, http.MethodPost, fmt.Sprintf("/api/v1/ops/orders/%d/lines/76/cancel", cancelled.id),
		map[string]any{"units": 1, "reason": "damaged"}, "Idempotency-Key", cancelled.lineCancel)
	if err != nil {
		return nil, err
	}
	if a.status != http.StatusOK && a.status != http.StatusAccepted {
		return nil, fmt.Errorf("line cancellation: %d %s", a.status, a.raw)
	}
	if err := waitFor(ctx, 2*time.Minute, "the line cancellation parked", func() (bool, error) {
		s, err := d.lineCancelState(ctx, cancelled)
		return s == "NEEDS_ATTENTION", err
	}); err != nil {
		return nil, err
	}
	out = append(out, cancelled)
	d.say("%-22s order %d: line cancellation NEEDS_ATTENTION (refund refused)", cancelled.scenario, cancelled.id)

	// The acquirer goes down (lookups still answer): the approved payment's capture fails and the
	// order parks for support. Then the provider holds the intent where it captures nothing from,
	// so the capture's own retries are refused too once the acquirer is back, and the order waits
	// for support whatever the timing.
	if err := d.faults(ctx, map[string]float64{"moneyDownForSeconds": 1800}); err != nil {
		return nil, err
	}
	if err := d.threeDS(ctx, parked, "approve"); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 2*time.Minute, "the order parked after confirm", func() (bool, error) {
		s, err := d.orderStatus(ctx, parked.id)
		return s == "NEEDS_ATTENTION", err
	}); err != nil {
		return nil, err
	}
	if _, err := d.pool.Exec(ctx, `UPDATE paysim.intents SET status = 'REQUIRES_ACTION' WHERE order_id = $1`, parked.id); err != nil {
		return nil, err
	}
	d.say("%-22s order %d: NEEDS_ATTENTION (capture refused)", parked.scenario, parked.id)

	// The provider answers slowly, and goes down while a new order's authorization is under way:
	// its outcome is unknown and cannot be asked, so the shopper gets 201 with the payment UNKNOWN
	// and the order waits.
	if err := d.faults(ctx, map[string]float64{"latencyMs": 3000}); err != nil {
		return nil, err
	}
	type placed struct {
		o   order
		err error
	}
	done := make(chan placed, 1)
	go func() {
		o, err := d.place(ctx, "payment-unknown", "CONFIRMED", next(), 77, "tok_timeout")
		done <- placed{o, err}
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(1500 * time.Millisecond):
	}
	if err := d.faults(ctx, map[string]float64{"downForSeconds": 1800}); err != nil {
		return nil, err
	}
	p := <-done
	if err := add(p.o, p.err); err != nil {
		return nil, err
	}
	if st, _ := d.scalar(ctx, `SELECT status FROM payments WHERE order_id = $1`, p.o.id); st != "UNKNOWN" {
		return nil, fmt.Errorf("payment-unknown: the order's payment is %q, not UNKNOWN", st)
	}
	d.say("%-22s order %d: payment UNKNOWN, the provider down", p.o.scenario, p.o.id)
	return out, nil
}

// finish ends each order as its scenario says, on today's build: the provider back, the 3-D
// Secure pages answered, support's retries sent.
func (d *driver) finish(ctx context.Context, orders []order) error {
	if err := d.faults(ctx, map[string]float64{}); err != nil {
		return err
	}
	d.say("the provider answers again")
	for _, o := range orders {
		switch o.scenario {
		case "3ds-approve", "hold-extended":
			if err := d.threeDS(ctx, o, "approve"); err != nil {
				return err
			}
		case "3ds-decline":
			if err := d.threeDS(ctx, o, "decline"); err != nil {
				return err
			}
		case "parked-after-confirm":
			if _, err := d.pool.Exec(ctx, `UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE order_id = $1`, o.id); err != nil {
				return err
			}
			if err := d.supportRetry(ctx, o); err != nil {
				return err
			}
		case "line-cancel-parked":
			if _, err := d.pool.Exec(ctx, `UPDATE paysim.intents SET status = 'CAPTURED' WHERE order_id = $1`, o.id); err != nil {
				return err
			}
			if err := d.supportRetry(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// supportRetry sends support's retry to the order's (or the line cancellation's) workflow, as
// the UI sends it, encrypted by a trusted client and naming who sent it.
func (d *driver) supportRetry(ctx context.Context, o order) error {
	h, err := d.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: o.workflowID(),
		UpdateName: workflows.SupportAction, WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{map[string]any{"action": "retry", "reason": "upgrade drill: the provider is back",
			"actor": map[string]any{"sub": "upgrade-drill", "role": "support", "name": "upgrade drill", "via": "upgrade-drill"}}}})
	if err != nil {
		return fmt.Errorf("support retry of %s: %w", o.workflowID(), err)
	}
	if err := h.Get(ctx, nil); err != nil {
		return fmt.Errorf("support retry of %s refused: %w", o.workflowID(), err)
	}
	d.say("%-22s order %d: support retried", o.scenario, o.id)
	return nil
}

// outcome waits for the order to end and tells how it did.
func (d *driver) outcome(ctx context.Context, o order) Row {
	row := Row{Scenario: o.scenario, Workflow: o.workflowID(), Want: o.want}
	state := func() (string, error) { return d.state(ctx, o) }
	_ = waitFor(ctx, 3*time.Minute, o.scenario+" ended", func() (bool, error) {
		s, err := state()
		row.Got = s
		return s == o.want, err
	})
	if row.Got != o.want {
		if s, err := state(); err == nil {
			row.Got = s
		}
	}
	row.Builds = d.taskBuilds(ctx, o.workflowID())
	row.OK = row.Got == o.want
	return row
}

// taskBuilds lists the builds whose workers completed the workflow's tasks, each once, in order.
func (d *driver) taskBuilds(ctx context.Context, workflowID string) []string {
	var out []string
	it := d.tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return append(out, "?")
		}
		a := e.GetWorkflowTaskCompletedEventAttributes()
		if a == nil {
			continue
		}
		b := a.GetDeploymentVersion().GetBuildId()
		if b == "" {
			b = "unversioned"
		}
		if len(out) == 0 || out[len(out)-1] != b {
			out = append(out, b)
		}
	}
	return out
}

// drainedAndStopped waits for Temporal to report the build drained and for the cluster to stop
// its workers once the query window has passed.
func (d *driver) drainedAndStopped(ctx context.Context, build string) (drained, stopped bool) {
	h := d.tc.WorkerDeploymentClient().GetHandle("checkout")
	drained = waitFor(ctx, 2*time.Minute, build+" drained", func() (bool, error) {
		v, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
		return err == nil && v.Info.DrainageInfo != nil &&
			v.Info.DrainageInfo.DrainageStatus == client.WorkerDeploymentVersionDrainageStatusDrained, err
	}) == nil
	stopped = waitFor(ctx, time.Minute+queryWindow, build+"'s workers stopped", func() (bool, error) {
		raw, err := os.ReadFile(filepath.Join(d.stack.Dir, "processes.json"))
		if err != nil {
			return false, err
		}
		var state map[string]json.RawMessage
		if err := json.Unmarshal(raw, &state); err != nil {
			return false, err
		}
		for name := range state {
			if strings.HasPrefix(name, strings.TrimSuffix(cluster.WorkerName(build, 0), "0")) {
				return false, nil
			}
		}
		return true, nil
	}) == nil
	if stopped {
		d.say("%s drained; its workers stopped", build)
	}
	return drained, stopped
}

// audit runs today's `checkout audit` against the cluster.
func (d *driver) audit(ctx context.Context, today string) (string, bool) {
	out, err := d.checkout(ctx, today, "audit")
	return out, err == nil
}

// checkout runs a command of the checkout binary with the cluster's settings (checkout.env), as
// ops do from a shell.
func (d *driver) checkout(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	env, err := os.ReadFile(filepath.Join(d.stack.Dir, "checkout.env"))
	if err != nil {
		return "", err
	}
	cmd.Env = os.Environ()
	for _, line := range strings.Split(string(env), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			cmd.Env = append(cmd.Env, line)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
