package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeCounter is a tracer on the product's pool that keeps, while on, every transaction that
// wrote: an explicit one whose commit finds a transaction id assigned (PostgreSQL assigns one at a
// transaction's first write, so read-only ones have none), and a statement outside any that
// changed rows, ran a data-changing statement or called a function that writes (its own
// transaction). Each is kept as the names of
// its statements (sqlc's "-- name:"), so a test can say which ones it expects.
type writeCounter struct {
	mu sync.Mutex
	on bool
	// writers matches a call of a function of the database's that writes (reserve_order): a
	// statement outside a transaction that calls one is a write transaction of its own.
	writers *regexp.Regexp
	open    map[*pgx.Conn][]string // the statements of each connection's open transaction
	trips   map[*pgx.Conn]int      // the round trips of each connection's open transaction
	// wrote: a statement of the connection's open transaction changes rows (or locks them), by
	// its text, for a transaction whose COMMIT goes in a batch (db.InTx): by then
	// pg_current_xact_id_if_assigned can no longer be asked before it.
	wrote map[*pgx.Conn]bool
	// commits: the connection's batch under way ends with its transaction's COMMIT.
	commits map[*pgx.Conn]bool
	writes  [][]string
	// tripsOf are the round trips each of writes took (BEGIN and COMMIT included; a batch is one).
	tripsOf []int
	// rounds are every round trip to the database while on, on any connection, each as the names
	// of the statements it carried (a batch's joined by "+").
	rounds []string
}

func newWriteCounter() *writeCounter {
	return &writeCounter{open: map[*pgx.Conn][]string{}, trips: map[*pgx.Conn]int{}, wrote: map[*pgx.Conn]bool{},
		commits: map[*pgx.Conn]bool{}}
}

// assignedSQL asks, in the transaction about to commit, whether it wrote.
const assignedSQL = "SELECT pg_current_xact_id_if_assigned() IS NOT NULL"

var (
	sqlcName = regexp.MustCompile(`^-- name: (\w+)`)
	changes  = regexp.MustCompile(`(?i)\b(insert|update|delete|merge)\b`)
)

func statementName(sql string) string {
	if m := sqlcName.FindStringSubmatch(sql); m != nil {
		return m[1]
	}
	first, _, _ := strings.Cut(strings.Join(strings.Fields(sql), " "), " FROM ")
	return first
}

func (w *writeCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	sql := strings.TrimSpace(d.SQL)
	low := strings.ToLower(sql)
	if sql != assignedSQL {
		w.mu.Lock()
		if w.on {
			w.rounds = append(w.rounds, statementName(sql))
		}
		w.mu.Unlock()
	}
	switch {
	case sql == assignedSQL:
	case strings.HasPrefix(low, "begin"):
		w.mu.Lock()
		w.open[conn], w.trips[conn], w.wrote[conn] = []string{}, 1, false
		w.mu.Unlock()
	case low == "commit" || low == "rollback":
		w.mu.Lock()
		stmts, ok := w.open[conn]
		trips := w.trips[conn] + 1
		delete(w.open, conn)
		delete(w.trips, conn)
		delete(w.wrote, conn)
		on := w.on
		w.mu.Unlock()
		if !ok || !on || low == "rollback" {
			break
		}
		var wrote bool
		if err := conn.QueryRow(ctx, assignedSQL).Scan(&wrote); err == nil && wrote {
			w.mu.Lock()
			w.writes, w.tripsOf = append(w.writes, stmts), append(w.tripsOf, trips)
			w.mu.Unlock()
		}
	default:
		w.mu.Lock()
		if stmts, ok := w.open[conn]; ok {
			w.open[conn] = append(stmts, statementName(sql))
			w.trips[conn]++
			if w.isWrite(sql) {
				w.wrote[conn] = true
			}
		}
		w.mu.Unlock()
	}
	return context.WithValue(ctx, traceSQL{}, sql)
}

// isWrite reports whether sql changes rows (or locks them) by its text, or calls a function of the
// database's that writes.
func (w *writeCounter) isWrite(sql string) bool {
	return changes.MatchString(sql) || (w.writers != nil && w.writers.MatchString(sql))
}

type traceSQL struct{}

func (w *writeCounter) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(traceSQL{}).(string)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, inTx := w.open[conn]; inTx || !w.on || d.Err != nil || sql == assignedSQL {
		return
	}
	low := strings.ToLower(sql)
	if strings.HasPrefix(low, "begin") || low == "commit" || low == "rollback" {
		return
	}
	if d.CommandTag.Insert() || d.CommandTag.Update() || d.CommandTag.Delete() || w.isWrite(sql) {
		w.writes, w.tripsOf = append(w.writes, []string{statementName(sql)}), append(w.tripsOf, 1)
	}
}

// A batch's statements count as they would one by one: in an open transaction they are among
// its statements, and outside one a write is a transaction of its own (a batch's statements
// share one implicit transaction, but the product sends a write outside a transaction only after
// its trace context's settings).
// A batch that starts with BEGIN opens its transaction (db.InTx), and one that ends with COMMIT
// closes it once its answers are read.
func (w *writeCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	var qs []*pgx.QueuedQuery
	if d.Batch != nil {
		qs = d.Batch.QueuedQueries
	}
	if _, ok := w.open[conn]; !ok && len(qs) > 0 && strings.EqualFold(strings.TrimSpace(qs[0].SQL), "begin") {
		w.open[conn], w.trips[conn], w.wrote[conn] = []string{}, 0, false
	}
	if _, ok := w.open[conn]; ok {
		w.trips[conn]++
		w.commits[conn] = len(qs) > 0 && strings.EqualFold(strings.TrimSpace(qs[len(qs)-1].SQL), "commit")
	}
	if w.on {
		names := make([]string, len(qs))
		for i, q := range qs {
			names[i] = statementName(strings.TrimSpace(q.SQL))
		}
		w.rounds = append(w.rounds, strings.Join(names, "+"))
	}
	return ctx
}

func (w *writeCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	sql := strings.TrimSpace(d.SQL)
	w.mu.Lock()
	if stmts, ok := w.open[conn]; ok && !strings.EqualFold(sql, "begin") && !strings.EqualFold(sql, "commit") {
		w.open[conn] = append(stmts, statementName(sql))
		if w.isWrite(sql) {
			w.wrote[conn] = true
		}
	}
	w.mu.Unlock()
	w.TraceQueryEnd(context.WithValue(ctx, traceSQL{}, sql), conn,
		pgx.TraceQueryEndData{CommandTag: d.CommandTag, Err: d.Err})
}

func (w *writeCounter) TraceBatchEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.commits[conn] {
		return
	}
	stmts, trips, wrote := w.open[conn], w.trips[conn], w.wrote[conn]
	delete(w.open, conn)
	delete(w.trips, conn)
	delete(w.wrote, conn)
	delete(w.commits, conn)
	if w.on && wrote && d.Err == nil {
		w.writes, w.tripsOf = append(w.writes, stmts), append(w.tripsOf, trips)
	}
}

// learnWriters reads which of the database's own functions write.
func (w *writeCounter) learnWriters(t *testing.T, s *stack) {
	var names []string
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT coalesce(array_agg(p.proname::text), '{}') FROM pg_proc p
		JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.prosrc ~* '\m(insert|update|delete)\M'`).Scan(&names))
	require.Contains(t, names, "reserve_order")
	w.writers = regexp.MustCompile(`(?i)\b(` + strings.Join(names, "|") + `)\s*\(`)
}

// start counts from now; stop ends the count and returns the write transactions.
func (w *writeCounter) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on, w.writes, w.tripsOf, w.rounds = true, nil, nil, nil
}

// roundTrips returns the round trips since start or the last call, and counts on from none. The
// feature switches' refresh, which runs on its own clock, is left out.
func (w *writeCounter) roundTrips() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.DeleteFunc(w.rounds, func(r string) bool { return r == "FeatureSwitches" })
	w.rounds = nil
	return out
}

func (w *writeCounter) stop() ([][]string, []int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on = false
	return w.writes, w.tripsOf
}

// orderWrites places an order with token (then does what then does: a 3-D Secure answer) and
// returns the product's write transactions from POST /orders until the order's workflow closed,
// the round trips each took, and the order.
func (s *stack) orderWrites(count *writeCounter, user int64, token string, then func(r reply)) ([][]string, []int, int64) {
	s.t.Helper()
	sh := s.shopper(user)
	sh.fill(map[int64]int32{71: 1})
	pv := sh.preview()
	key := "k-" + randomHex(8)
	count.start()
	r := sh.order(key, pv, token)
	if then != nil {
		then(r)
	}
	require.NoError(s.t, s.temporal.GetWorkflow(s.ctx, sh.workflowOf(key), "").Get(s.ctx, nil))
	writes, trips := count.stop()
	var names []string
	for i, tx := range writes {
		names = append(names, fmt.Sprintf("%s (%d round trips)", strings.Join(tx, "+"), trips[i]))
	}
	s.t.Logf("%s: %d write transactions\n  %s", token, len(writes), strings.Join(names, "\n  "))
	return writes, trips, r.int("orderId")
}

// tripsOf is the round trips of the write transaction that ran the statement named marker.
func tripsOf(t *testing.T, writes [][]string, trips []int, marker string) int {
	t.Helper()
	i := slices.IndexFunc(writes, func(tx []string) bool { return slices.Contains(tx, marker) })
	require.GreaterOrEqual(t, i, 0, "no write transaction ran %s", marker)
	return trips[i]
}

// TestPostgresCommits_PaidAtOnceOrder_AtMostSeven: an order paid at once makes at most seven write
// transactions in the product's database from POST /orders until its workflow has closed,
// CONFIRMED: the API keeps the payment method, then the saga writes the order row, the
// reservation (with the hold's end), the attempt and the intent's id before the provider holds
// money, the confirm of the stock, and one transaction for the capture's mirror, the recorded
// answer and the CONFIRMED row. (Build saga-7 made eleven: the hold's end, the authorization's
// mirror, the answer, the capture's mirror and the end each in a transaction of its own.) The
// payment simulator's writes, in its own schema and pool, are not the product's and are not
// counted; nor are the loops', which do not run here. The order's creation, its confirm and its
// end take at most three, three and two round trips. Orders declined at once and paid through
// 3-D Secure are measured beside it.
func TestPostgresCommits_PaidAtOnceOrder_AtMostSeven(t *testing.T) {
	t.Parallel()
	count := newWriteCounter()
	s := startStack(t, stackOptions{tracer: count, noLoops: true})
	count.learnWriters(t, s)

	writes, trips, id := s.orderWrites(count, 7301, "tok_ok", nil)
	assert.Equal(t, "CONFIRMED", statusOf(t, s, id))
	assert.LessOrEqual(t, len(writes), 7, "write transactions of an order paid at once")
	assert.Equal(t, []string{"SavePaymentMethodToken", "InsertOrder", "ReserveOrder", "AuthorizeAttempted", "RecordIntentID",
		"ConfirmReservations", "RecordPayment+InsertIdempotencyRecord+TransitionOrder"}, kinds(writes),
		"what each write transaction was")
	// The writes whose answer is only their error go with the transaction's next statement, BEGIN
	// with its first and COMMIT with its last writes (db.InTx): the shopper's lock with the order's
	// row, then its line, timeline entry, event and payment row with the COMMIT; the stock rows'
	// lock with the confirm; the end's mirror, answer and row with the BEGIN, then its coupon,
	// timeline entry and event with the COMMIT. One statement at a time they took 9, 5 and 8.
	assert.LessOrEqual(t, tripsOf(t, writes, trips, "InsertOrder"), 3,
		"the order's creation: BEGIN with the address, the shopper's lock with the row, the rest with COMMIT")
	assert.LessOrEqual(t, tripsOf(t, writes, trips, "ConfirmReservations"), 3,
		"the confirm: BEGIN with the reservations' lock, the stock rows' lock with the confirm, COMMIT")
	assert.LessOrEqual(t, tripsOf(t, writes, trips, "TransitionOrder"), 2,
		"the order's end: BEGIN with the mirror, the answer and the row's move, the rest with COMMIT")

	writes, _, id = s.orderWrites(count, 7302, "tok_decline", nil)
	assert.Equal(t, "FAILED", statusOf(t, s, id))
	assert.Contains(t, kinds(writes), "InsertIdempotencyRecord+TransitionOrder", "the decline recorded with the order's end")
	t.Logf("declined at once: %v", kinds(writes))

	writes, _, id = s.orderWrites(count, 7303, "tok_3ds", func(r reply) {
		require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	})
	assert.Equal(t, "CONFIRMED", statusOf(t, s, id))
	t.Logf("3-D Secure approved: %v", kinds(writes))
}

// statusOf reads an order's status.
func statusOf(t *testing.T, s *stack, orderID int64) string {
	var status string
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT status FROM orders WHERE id = $1`, orderID).Scan(&status))
	return status
}

// markers are the statements that say what a write transaction of an order is.
var markers = []string{"SavePaymentMethodToken", "InsertOrder", "ReserveOrder", "SetOrderHold", "AuthorizeAttempted",
	"RecordIntentID", "ConfirmReservations", "ReleaseReservations", "ClaimWebhookEvent", "WebhookEventDone", "RecordPayment",
	"InsertIdempotencyRecord", "TransitionOrder"}

// kinds names each write transaction by the markers among its statements, in their order.
func kinds(writes [][]string) []string {
	out := make([]string, len(writes))
	for i, tx := range writes {
		var names []string
		for _, m := range markers {
			if slices.Contains(tx, m) {
				names = append(names, m)
			}
		}
		out[i] = strings.Join(names, "+")
	}
	return out
}

// TestPostgresRoundTrips_VisitAndPaidOrder counts every round trip the product makes to its
// database for a shopper's visit and an order paid at once, request by request: reads that need
// nothing of one another go together in one batch, a write whose answer is only its error goes
// with the next statement, and a transaction's BEGIN goes with its first statement and its COMMIT
// with its last writes (db.InTx). A new address: BEGIN with the shopper's lock and the insert,
// COMMIT. A new cart line: the SKU's price with the cart, the write, the line's figures. The
// preview: the cart, then its prices with its stock. The order, from POST /orders until its
// workflow has closed: the request's payment method (2), the price check (the request's order with
// the cart, then the prices: 2), the order's creation (3), the reserve (2), the authorization (the
// payment with its method's token, the attempt, the intent's id: 3), the confirm (3), the
// capture's read (1) and the end (2). One read after another and BEGIN and COMMIT on their own,
// the build before took 4, 4, 3 and 26.
func TestPostgresRoundTrips_VisitAndPaidOrder(t *testing.T) {
	t.Parallel()
	count := newWriteCounter()
	s := startStack(t, stackOptions{tracer: count, noLoops: true})
	const sku = 71
	seller := sellerOf(s, sku)

	count.start()
	sh := s.shopper(7311)
	address := count.roundTrips()
	r := s.call(http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", sku), sh.token, nil,
		map[string]any{"sellerId": seller, "quantity": 1})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	line := count.roundTrips()
	pv := sh.preview()
	preview := count.roundTrips()
	key := "k-" + randomHex(8)
	placed := sh.order(key, pv, "tok_ok")
	require.Equal(t, http.StatusCreated, placed.status, placed.raw)
	require.NoError(t, s.temporal.GetWorkflow(s.ctx, sh.workflowOf(key), "").Get(s.ctx, nil))
	ordered := count.roundTrips()
	count.stop()
	assert.Equal(t, "CONFIRMED", statusOf(t, s, placed.int("orderId")))

	for _, c := range []struct {
		what  string
		trips []string
		most  int
	}{
		{"a new address", address, 2},
		{"a new cart line", line, 3},
		{"the checkout preview", preview, 2},
		{"an order paid at once, POST /orders until its workflow closed", ordered, 18},
	} {
		t.Logf("%s: %d round trips\n  %s", c.what, len(c.trips), strings.Join(c.trips, "\n  "))
		assert.LessOrEqual(t, len(c.trips), c.most, "round trips of %s: %v", c.what, c.trips)
	}
}
