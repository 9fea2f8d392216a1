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
	writes  [][]string
	// tripsOf are the round trips each of writes took (BEGIN and COMMIT included; a batch is one).
	tripsOf []int
	// rounds are every round trip to the database while on, on any connection, each as the names
	// of the statements it carried (a batch's joined by "+").
	rounds []string
}

func newWriteCounter() *writeCounter {
	return &writeCounter{open: map[*pgx.Conn][]string{}, trips: map[*pgx.Conn]int{}}
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
		w.open[conn], w.trips[conn] = []string{}, 1
		w.mu.Unlock()
	case low == "commit" || low == "rollback":
		w.mu.Lock()
		stmts, ok := w.open[conn]
		trips := w.trips[conn] + 1
		delete(w.open, conn)
		delete(w.trips, conn)
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
		}
		w.mu.Unlock()
	}
	return context.WithValue(ctx, traceSQL{}, sql)
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
	if d.CommandTag.Insert() || d.CommandTag.Update() || d.CommandTag.Delete() || changes.MatchString(sql) ||
		(w.writers != nil && w.writers.MatchString(sql)) {
		w.writes, w.tripsOf = append(w.writes, []string{statementName(sql)}), append(w.tripsOf, 1)
	}
}

// A batch's statements count as they would one by one: in an open transaction they are among
// its statements, and outside one a write is a transaction of its own (a batch's statements
// share one implicit transaction, but the product sends a write outside a transaction only after
// its trace context's settings).
func (w *writeCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	w.mu.Lock()
	if _, ok := w.open[conn]; ok {
		w.trips[conn]++
	}
	if w.on && d.Batch != nil {
		names := make([]string, len(d.Batch.QueuedQueries))
		for i, q := range d.Batch.QueuedQueries {
			names[i] = statementName(strings.TrimSpace(q.SQL))
		}
		w.rounds = append(w.rounds, strings.Join(names, "+"))
	}
	w.mu.Unlock()
	return ctx
}

func (w *writeCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	w.mu.Lock()
	if stmts, ok := w.open[conn]; ok {
		w.open[conn] = append(stmts, statementName(d.SQL))
	}
	w.mu.Unlock()
	w.TraceQueryEnd(context.WithValue(ctx, traceSQL{}, strings.TrimSpace(d.SQL)), conn,
		pgx.TraceQueryEndData{CommandTag: d.CommandTag, Err: d.Err})
}

func (w *writeCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

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
// end take at most six, four and four round trips. Orders declined at once and paid through 3-D Secure are measured
// beside it.
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
	// The writes whose answer is only their error go with the transaction's next statement or at
	// its end (db.InPipe): the shopper's lock with the order's row, then its line, timeline entry,
	// event and payment row in one batch; the stock rows' lock with the confirm; the end's mirror,
	// answer and row, then its coupon, timeline entry and event in another. One statement at a
	// time they took 9, 5 and 8.
	assert.LessOrEqual(t, tripsOf(t, writes, trips, "InsertOrder"), 5,
		"the order's creation: BEGIN, the address, the shopper's lock with the row, the rest, COMMIT")
	assert.LessOrEqual(t, tripsOf(t, writes, trips, "ConfirmReservations"), 4,
		"the confirm: BEGIN, the reservations' lock, the stock rows' lock with the confirm, COMMIT")
	assert.LessOrEqual(t, tripsOf(t, writes, trips, "TransitionOrder"), 4,
		"the order's end: BEGIN, the mirror and answer with the row's move, the rest, COMMIT")

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
// nothing of one another go together in one batch, and a write whose answer is only its error goes
// with the next statement. A new address: BEGIN, the shopper's lock with the insert, COMMIT. A new
// cart line: the SKU's price with the cart, the write, the line's figures. The preview: the cart,
// then its prices with its stock. The order, from POST /orders until its workflow has closed:
// the request's payment method (2), the price check (the request's order with the cart, then the
// prices: 2), the order's creation (5), the reserve (2), the authorization (the payment with its
// method's token, the attempt, the intent's id: 3), the confirm (4), the capture's read (1) and
// the end (4). One read after another, the build before took 4, 4, 3 and 26.
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
		{"a new address", address, 3},
		{"a new cart line", line, 3},
		{"the checkout preview", preview, 2},
		{"an order paid at once, POST /orders until its workflow closed", ordered, 23},
	} {
		t.Logf("%s: %d round trips\n  %s", c.what, len(c.trips), strings.Join(c.trips, "\n  "))
		assert.LessOrEqual(t, len(c.trips), c.most, "round trips of %s: %v", c.what, c.trips)
	}
}
