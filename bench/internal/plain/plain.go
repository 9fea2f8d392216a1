// Package plain is the saga's baseline in the benchmarks: a checkout endpoint without Temporal, one
// PostgreSQL transaction per order, written only for them. It answers as the API does, so that the
// load generator can send its orders there and everything else of a shopper's visit to the API.
package plain

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// workflowID marks the orders of the plain endpoint (orders.workflow_id is NOT NULL; no workflow
// ever runs for them), so that Settle can find them afterwards.
const workflowID = "bench-plain-checkout"

// path is the plain endpoint's route, on its own port in the process that starts it.
const path = "/plain/v1/orders"

// Server is the baseline of the saga: a checkout without Temporal, written only for the
// benchmarks. One PostgreSQL transaction per request reads the shopper's address, cart and the
// catalog's prices and refuses what the saga's price check refuses (cart.Price), writes the
// order as the saga's order step does (order.Insert, with its order.created event, which the
// product's relay publishes) but without a payment row, and reserves every line with the
// product's own SQL (reserve_order, the statement Engine.Reserve runs when it does not combine).
// It writes no event of its own: one this build cannot publish would stop the relay, and every
// event behind it, on a stack the product shares. There is no payment step: the order is a tok_ok
// order that will be paid later; nothing durable but the transaction stands behind the answer.
type Server struct {
	pool   *pgxpool.Pool
	secret []byte
	hold   time.Duration
	srv    *http.Server
	URL    string
}

// Start serves the plain endpoint on a loopback port of its own, over a pool of at most maxConns
// connections to dbURL opened as the product opens its own (db.Connect: one generic plan per
// statement); secret verifies the shoppers' tokens, hold is the reservations' lifetime.
func Start(ctx context.Context, dbURL string, maxConns int32, secret []byte, hold time.Duration) (*Server, error) {
	pool, err := db.Connect(ctx, dbURL, maxConns)
	if err != nil {
		return nil, err
	}
	p := &Server{pool: pool, secret: secret, hold: hold}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST(path, p.order)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, err
	}
	p.URL = "http://" + l.Addr().String() + path
	p.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// Close stops serving and closes the pool.
func (p *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	p.pool.Close()
}

type plainRequest struct {
	PriceVersion       string `json:"priceVersion"`
	AddressID          int64  `json:"addressId"`
	PaymentMethodToken string `json:"paymentMethodToken"`
}

// answer is the HTTP answer a transaction decided on.
type answer struct {
	status int
	body   map[string]any
}

// shortLines are an OUT_OF_STOCK answer's details: every short line.
type shortLines struct {
	Items []map[string]any `json:"items"`
}

// fail answers a coded refusal as the API does: its code's status, its code, message and details.
func fail(p *problem.Error) *answer {
	body := map[string]any{}
	if raw, err := json.Marshal(p.Details); err == nil && p.Details != nil {
		_ = json.Unmarshal(raw, &body)
	}
	body["code"], body["message"] = p.Code, p.Message
	return &answer{status: api.StatusOf(p.Code), body: body}
}

func reply(c echo.Context, a *answer) error { return c.JSON(a.status, a.body) }

// errStockMoved: reserve_order found the stock changed between its choice of warehouses and the
// reservation (SQLSTATE CK001); the transaction is rolled back and tried again, as the engine does.
var errStockMoved = errors.New("stock moved")

const stockMovedCode = "CK001"

func (p *Server) order(c echo.Context) error {
	tok, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
	principal, err := auth.Verify(p.secret, tok)
	if !ok || err != nil || principal.Role != auth.RoleShopper {
		return reply(c, fail(problem.New(problem.Unauthorized, "a shopper's bearer token is required")))
	}
	key := c.Request().Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		return reply(c, fail(problem.New(problem.ValidationFailed, "Idempotency-Key: 1 to 255 characters")))
	}
	var req plainRequest
	if err := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, 1<<20)).Decode(&req); err != nil {
		return reply(c, fail(problem.New(problem.InvalidJSON, "the body is not JSON")))
	}
	if req.PaymentMethodToken != "tok_ok" || req.PriceVersion == "" || req.AddressID <= 0 {
		return reply(c, fail(problem.New(problem.ValidationFailed,
			"priceVersion, addressId and paymentMethodToken tok_ok (the plain checkout has no payment step)")))
	}
	sum := sha256.Sum256([]byte(req.PriceVersion + "|" + strconv.FormatInt(req.AddressID, 10) + "|" + req.PaymentMethodToken))
	hash := hex.EncodeToString(sum[:])
	ctx := c.Request().Context()
	for attempt := 0; attempt < 8; attempt++ {
		a, err := p.checkout(ctx, principal.UserID, key, hash, req)
		if errors.Is(err, errStockMoved) {
			continue
		}
		if err != nil {
			c.Logger().Error(err)
			return reply(c, fail(problem.New(problem.Internal, "the checkout failed")))
		}
		return reply(c, a)
	}
	return reply(c, fail(problem.New(problem.Unavailable, "the stock kept moving; repeat the request")))
}

// checkout is the one transaction.
func (p *Server) checkout(ctx context.Context, userID int64, key, hash string, req plainRequest) (*answer, error) {
	var out *answer
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		out = nil
		addr, err := order.DataOf(tx).GetAddress(ctx, req.AddressID, userID)
		if db.NotFound(err) {
			out = fail(problem.New(problem.ValidationFailed, "addressId: not one of your addresses"))
			return nil
		} else if err != nil {
			return err
		}
		priced, err := cart.Price(ctx, tx, userID, "", nil)
		if refusal, ok := problem.As(err); ok {
			out = fail(refusal)
			return nil
		} else if err != nil {
			return err
		}
		if refusal := priced.Refusal(req.PriceVersion); refusal != nil {
			out = fail(refusal)
			return nil
		}
		quote := priced.Quote
		// The order as the saga's CreateOrder writes it, but without a payment row: the plain
		// checkout has no payment step.
		created, err := order.Insert(ctx, tx, order.New{UserID: userID, IdempotencyKey: key, RequestHash: hash,
			WorkflowID: workflowID, AddressID: req.AddressID, Quote: quote})
		switch {
		case errors.Is(err, order.ErrKeyReused):
			out = fail(problem.New(problem.IdempotencyKeyReused, err.Error()))
			return nil
		case err != nil:
			return err
		case !created.Made:
			// The same key again: the same order (the first request's transaction has committed,
			// or this insert would still be waiting on its key).
			out = &answer{status: http.StatusCreated, body: map[string]any{"orderId": created.ID, "status": created.Status}}
			return nil
		}
		id := created.ID
		// Reserved last but one, so the inventory rows (a hot SKU's among them) are held only
		// from here to the commit.
		var skuIDs []int64
		var quantities []int32
		for _, it := range quote.Items {
			skuIDs = append(skuIDs, it.SKUID)
			quantities = append(quantities, it.Quantity)
		}
		short, expires, err := reserveOrder(ctx, tx, id, skuIDs, quantities, addr.Lat, addr.Lon, p.hold)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == stockMovedCode {
			return errStockMoved
		} else if err != nil {
			return err
		}
		if short != nil {
			out = fail(problem.New(problem.OutOfStock, "some lines are out of stock").WithDetails(shortLines{Items: short}))
			return errOutOfStock // roll back the order row
		}
		out = &answer{status: http.StatusCreated, body: map[string]any{"orderId": id, "status": order.StatusPendingPayment,
			"holdExpiresAt": expires}}
		return nil
	})
	if errors.Is(err, errOutOfStock) {
		return out, nil
	}
	return out, err
}

var errOutOfStock = errors.New("out of stock")

// settled is the failure code of the plain orders Settle cancels.
const settled problem.Code = "BENCH_PLAIN"

// Settle cancels the plain orders still open and gives their stock back as the product gives
// up an order (order.Store.GiveUp), untimed, so that the stock is exact and the audit judges only
// what the product did: the plain endpoint never pays, and no hold or sweeper of the product knows
// its orders.
func Settle(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	rows, err := pool.Query(ctx, `SELECT id FROM orders WHERE workflow_id = $1 AND status = $2`, workflowID,
		string(order.StatusPendingPayment))
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	orders := order.Store{Pool: pool}
	work := make(chan int64)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for id := range work {
				_, err := orders.GiveUp(ctx, id, order.StatusCancelled, settled, nil)
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, fmt.Errorf("order %d: %w", id, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return len(ids), firstErr
}

// reserveOrder runs the product's reserve_order in tx with plain SQL, as the product's own
// reservation does: its short lines (nil: every line reserved) and when the hold ends.
func reserveOrder(ctx context.Context, tx pgx.Tx, orderID int64, skuIDs []int64, quantities []int32, lat, lon float64,
	hold time.Duration) (short []map[string]any, expires time.Time, err error) {
	rows, err := tx.Query(ctx, `SELECT kind::text, sku_id::bigint, quantity::int, coalesce(available, 0)::int,
		coalesce(expires_at, 'epoch')::timestamptz
		FROM reserve_order($1::bigint, $2::bigint[], $3::int[], $4::float8, $5::float8, $6::float8)`,
		orderID, skuIDs, quantities, lat, lon, hold.Seconds())
	if err != nil {
		return nil, expires, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var skuID int64
		var quantity, available int32
		if err := rows.Scan(&kind, &skuID, &quantity, &available, &expires); err != nil {
			return nil, expires, err
		}
		if kind == "short" {
			short = append(short, map[string]any{"skuId": skuID, "requested": quantity, "available": available})
		}
	}
	return short, expires, rows.Err()
}
