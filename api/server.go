// Package api is the REST API: Echo routes, authentication, validation, and the one mapping of
// errors to HTTP answers. Business rules live in the packages it calls.
package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
)

// TemporalClient is the slice of the Temporal client the API uses.
type TemporalClient interface {
	CheckHealth(ctx context.Context, req *client.CheckHealthRequest) (*client.CheckHealthResponse, error)
	NewWithStartWorkflowOperation(options client.StartWorkflowOptions, workflow any, args ...any) client.WithStartWorkflowOperation
	UpdateWithStartWorkflow(ctx context.Context, options client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error)
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// PaymentLookup asks the payment provider for an intent.
type PaymentLookup interface {
	Lookup(ctx context.Context, ref payment.Ref) (payment.Intent, error)
}

// WebhookVerifier checks a provider's signed webhook delivery and reads its event:
// payment.ErrInvalidSignature when the signature does not hold.
type WebhookVerifier interface {
	VerifyWebhook(body []byte, header http.Header, now time.Time) (payment.WebhookEvent, error)
}

// PaymentPages are the provider's own pages (the simulator's 3-D Secure page), served by the API
// process.
type PaymentPages interface {
	Routes(e *echo.Echo)
}

var _ TemporalClient = (client.Client)(nil)

// Deps are what the API needs from the process that runs it.
type Deps struct {
	Options   Options
	Pool      *pgxpool.Pool
	Inventory *inventory.Engine
	Temporal  TemporalClient
	Metrics   *metrics.Metrics
	Log       *slog.Logger
	// Payments is the payment provider, asked about an intent before a webhook that names it is
	// routed to an order by its key.
	Payments PaymentLookup
	// Webhooks checks the provider's webhooks (nil: the simulator's signature, under
	// PAYMENT_WEBHOOK_SECRET).
	Webhooks WebhookVerifier
	// PaymentPages, when set, serves the payment simulator's pages.
	PaymentPages PaymentPages
	// PaymentFaults, when set, lets the ops role switch the simulator's injected faults.
	PaymentFaults PaymentFaults
	// Codec, when set, is the payload codec of the process's Temporal client: the codec endpoint
	// (/codec) decodes and encodes with it for the Temporal UI of support and ops staff.
	Codec converter.PayloadCodec
	// CartCache, when set, is the process's cache of cart documents: the cart page reads through
	// it and cart writes update it. It serves only while its Run is subscribed to the cart
	// notices, which the process runs beside the server (nil: every cart read goes to the
	// database).
	CartCache *cart.Cache
	// CartNotices announce this process's committed cart writes to every process's cache (nil:
	// none; then other processes' caches see them only after CART_CACHE_MAX_AGE).
	CartNotices *cart.Notices
	// Features are the feature switches, as the process reads them (nil: the API reads them
	// itself, through a cache of FEATURES_CACHE_TTL).
	Features *features.Switches
	// Tracer, when set, traces every request (W3C traceparent in, the request's span out); nil
	// when the process does not trace.
	Tracer trace.TracerProvider
}

// Server holds the API's dependencies; its methods are the handlers.
type Server struct {
	Deps
	orders order.Data
	tokens *auth.Verifier
	guests *auth.GuestTokens
	limits rateLimits
	// admission is the admission control of POST /orders (ORDERS_MAX_IN_FLIGHT,
	// ORDERS_ADMIT_MAX_LATENCY).
	admission *admission
}

// BodyLimit is the largest request body accepted.
const BodyLimit = "1M"

// MaxHeaderBytes bounds a request's header block (its request line included) on every listener
// of the product; more is 431 before any handler runs. Go's default is 1 MiB, which every
// request may make the server read and hold.
const MaxHeaderBytes = 32 << 10

// HTTPServer is a listener of the product (the API's, and the internal one of /metrics): bounded
// headers and time limits for every part of a request, so that no client holds a connection or
// the server's memory for long.
func HTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: MaxHeaderBytes}
}

// New builds the Echo server with every route.
func New(d Deps) *echo.Echo {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Features == nil {
		d.Features = features.New(d.Pool, features.Options{TTL: d.Options.FeaturesCacheTTL, Log: d.Log})
	}
	s := &Server{Deps: d, orders: order.DataOf(d.Pool),
		tokens: auth.NewVerifier(d.Options.AuthKeys, d.Options.AuthTokenCacheEntries),
		guests: auth.NewGuestTokens(d.Options.AuthKeys), limits: newRateLimits(d.Options.RateLimits),
		admission: newAdmission(d.Options.OrdersMaxInFlight, d.Options.OrdersAdmitMaxLatency, time.Now)}
	d.Metrics.RegisterCaches(s.cacheFigures)
	d.Metrics.RegisterAdmission(s.admission.figures)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = IPExtractor(d.Options.TrustedProxies)
	e.HTTPErrorHandler = errorHandler(d.Log)
	e.Use(requestIDs)
	if d.Tracer != nil {
		e.Use(otelecho.Middleware("checkout-api", otelecho.WithTracerProvider(d.Tracer),
			otelecho.WithPropagators(telemetry.Propagator),
			otelecho.WithSkipper(func(c echo.Context) bool { return c.Path() == "/healthz" || c.Path() == "/readyz" })))
	}
	e.Use(s.observe)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: s.logPanic}))
	e.Use(middleware.BodyLimit(BodyLimit))

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	// No /metrics here: the process serves it on its internal listener (METRICS_ADDR).

	shopper := e.Group("/api/v1", s.authenticate, requireRole(auth.RoleShopper))
	shopper.POST("/addresses", s.createAddress, s.rateLimit(s.limits.addresses))
	shopper.GET("/addresses", s.listAddresses)
	s.cartRoutes(e)
	// Admission control first: an order refused BUSY takes nothing from the rate limits.
	shopper.POST("/orders", s.createOrder, s.admitOrders, s.rateLimit(s.limits.orders))
	shopper.GET("/orders", s.listOrders)
	shopperOrSupport := []echo.MiddlewareFunc{s.authenticate, requireRole(auth.RoleShopper, auth.RoleSupport)}
	e.GET("/api/v1/orders/:orderId", s.getOrder, shopperOrSupport...)
	e.POST("/api/v1/orders/:orderId/cancel", s.cancelOrder, shopperOrSupport...)
	shopper.POST("/orders/:orderId/extend-hold", s.extendHold, s.rateLimit(s.limits.orders))
	e.POST("/api/v1/payments/webhook", s.paymentWebhook)
	if d.PaymentPages != nil {
		d.PaymentPages.Routes(e)
	}
	ops := e.Group("/api/v1/ops", s.authenticate, requireRole(auth.RoleOps))
	ops.GET("/features", s.getFeatures)
	ops.PUT("/features", s.putFeatures)
	ops.POST("/orders/:orderId/lines/:lineId/cancel", s.cancelLine)
	if d.PaymentFaults != nil {
		ops.GET("/payment-faults", s.getPaymentFaults)
		ops.PUT("/payment-faults", s.putPaymentFaults)
	}

	if d.Codec != nil {
		s.codecRoutes(e)
	}
	campaigns := e.Group("/api/v1/ops/campaigns", s.authenticate, requireRole(auth.RoleOps))
	campaigns.POST("", s.createCampaign)
	campaigns.GET("", s.listCampaigns)
	campaigns.POST("/:campaignId/end", s.endCampaign)
	coupons := e.Group("/api/v1/ops/coupons", s.authenticate, requireRole(auth.RoleOps))
	coupons.POST("", s.createCoupon)
	coupons.GET("", s.listCoupons)

	seller := e.Group("/seller-api/v1", s.authenticate, requireRole(auth.RoleSeller), s.rateLimit(s.limits.seller))
	seller.PUT("/skus", s.putSKUs)
	seller.PUT("/stocks", s.putStocks)
	seller.POST("/campaigns", s.createCampaign)
	seller.GET("/campaigns", s.listCampaigns)
	seller.POST("/campaigns/:campaignId/end", s.endCampaign)
	s.webhookRoutes(e, seller)
	return e
}

// observe logs every request as one JSON line and feeds the HTTP metrics. It runs the error
// handler itself so that the logged status is the one the client got.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if id, err := strconv.ParseInt(c.Param("orderId"), 10, 64); err == nil && id > 0 {
			noteOrder(c, id)
		}
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		elapsed := time.Since(start)
		method := knownMethod(c.Request().Method)
		s.Metrics.HTTPRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		ctx := c.Request().Context()
		telemetry.Observe(ctx, s.Metrics.HTTPDuration.WithLabelValues(route, method), elapsed.Seconds())
		if route != "/healthz" {
			level := slog.LevelInfo
			if busy, _ := c.Get(busyKey).(bool); status >= 500 && !busy {
				level = slog.LevelError
			}
			attrs := []slog.Attr{
				slog.String("request_id", requestID(c)), slog.String("method", method),
				slog.String("route", route), slog.Int("status", status),
				slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			}
			if p, ok := principal(c); ok {
				attrs = append(attrs, slog.Int64("user_id", p.UserID))
			}
			s.Log.LogAttrs(ctx, level, "http request", attrs...)
		}
		return nil
	}
}

// knownMethod is a request's method as the metrics and the log name it: one of HTTP's own, else
// OTHER. A client chooses the method (any token up to the header limit), so taken as it came it
// would make a new series, and a new line in every scrape, per request.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// noteOrder names the order the request serves: in its span, in every line logged with its
// context, and in its access log line.
func noteOrder(c echo.Context, orderID int64) {
	req := c.Request()
	trace.SpanFromContext(req.Context()).SetAttributes(attribute.Int64("order.id", orderID))
	c.SetRequest(req.WithContext(telemetry.WithOrder(req.Context(), orderID)))
}

// cacheFigures are the read caches' figures for /metrics.
func (s *Server) cacheFigures() metrics.CacheFigures {
	c := s.CartCache.Stats()
	hits, misses, held := s.tokens.Stats()
	return metrics.CacheFigures{CartEnabled: s.CartCache != nil, CartHits: c.Hits, CartMisses: c.Misses,
		CartNotifications: c.Notifications, CartEvictedChanged: c.Evicted, CartEvictedCapacity: c.Capacity,
		CartResets: c.Resets, CartReconnects: c.Reconnects, CartEntries: c.Entries, CartBytes: c.Bytes,
		CartListening: c.Listening, TokenEnabled: s.Options.AuthTokenCacheEntries > 0,
		TokenHits: hits, TokenMisses: misses, TokenEntries: held}
}

func (s *Server) logPanic(c echo.Context, err error, stack []byte) error {
	s.Log.ErrorContext(c.Request().Context(), "panic in handler", "error", err, "request_id", requestID(c), "stack", string(stack))
	return err
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

// MaxRequestIDLength bounds a client's X-Request-ID the API adopts.
const MaxRequestIDLength = 64

// requestIDs names every request: by the client's X-Request-ID when it is an id this API could
// have made (1 to MaxRequestIDLength letters, digits, '-', '_', '.', ':'), else by a new one. The
// id is answered in X-Request-ID and is the request_id of every log line about the request; one
// the client chose freely would carry anything of any length into both.
func requestIDs(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !acceptableRequestID(id) {
			id = newRequestID()
			c.Request().Header.Set(echo.HeaderXRequestID, id)
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

func acceptableRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_', b == '.', b == ':':
		default:
			return false
		}
	}
	return true
}

// newRequestID is 128 random bits in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only when PostgreSQL and Temporal both answer.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"database": "ok", "temporal": "ok"}
	ready := true
	if err := s.Pool.Ping(ctx); err != nil {
		checks["database"], ready = "unreachable", false
	}
	if s.Temporal == nil {
		checks["temporal"], ready = "not configured", false
	} else if _, err := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		checks["temporal"], ready = "unreachable", false
	}
	if !ready {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"code": problem.Unavailable,
			"message": "a dependency is unreachable", "checks": checks})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "checks": checks})
}

// readBody reads the whole request body; a body over the limit is 413.
func readBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(c.Request().Body)
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return nil, he
	}
	return body, err
}

// bind decodes a JSON body into v, whatever Content-Type says (curl -d sends a form type): malformed JSON is 400 INVALID_JSON, a body over the limit 413.
// The body must be one JSON value and nothing after it but white space, and no text in it may hold
// U+0000, which PostgreSQL text cannot store.
func bind(c echo.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return problem.New(problem.InvalidJSON, "request body is empty")
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field := typeErr.Field
			if field == "" {
				field = "body"
			}
			return problem.New(problem.ValidationFailed, "some fields are invalid").
				WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: field, Message: "must be " + jsonType(typeErr.Type.Kind().String())}}})
		}
		return problem.New(problem.InvalidJSON, "request body is not valid JSON")
	}
	if len(bytes.Trim(body[dec.InputOffset():], " \t\r\n")) > 0 {
		return problem.New(problem.InvalidJSON, "request body holds more than one JSON value")
	}
	if holdsNUL(body) {
		return problem.New(problem.ValidationFailed, "some fields are invalid").
			WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "body", Message: `no text may hold the NUL character \u0000`}}})
	}
	return nil
}

// holdsNUL reports whether a JSON text escapes U+0000 (\u0000) in a string; an unescaped control
// character is not JSON at all.
func holdsNUL(body []byte) bool {
	for i := 0; i+1 < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if body[i+1] == 'u' && i+6 <= len(body) && string(body[i+2:i+6]) == "0000" {
			return true
		}
		i++ // the escaped character: in \\u0000 the u is text
	}
	return false
}

func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "slice":
		return "an array"
	case kind == "struct", kind == "map":
		return "an object"
	case kind == "bool":
		return "true or false"
	}
	return "of another type"
}
