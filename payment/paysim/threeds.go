package paysim

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/payment"
)

// Routes registers the 3-D Secure page on e: GET shows the payment with Approve and Decline
// buttons, POST with result=approve|decline answers it (what the buttons send, and how scripts
// approve a payment). The page belongs to the provider, so it needs no checkout authentication:
// the unguessable intent id in the URL is the capability.
func (s *Sim) Routes(e *echo.Echo) {
	e.GET(ThreeDSPath+":intentId", s.threeDSPage)
	e.POST(ThreeDSPath+":intentId", s.threeDSAnswer)
}

type pageData struct {
	Title   string
	Message string
	Form    bool
	Intent  payment.Intent
	Amount  string
	// HeldUntil is when the shop's hold on the order's items ends, if known.
	HeldUntil string
}

func (s *Sim) threeDSPage(c echo.Context) error {
	id := c.Param("intentId")
	row, err := s.q.IntentByID(c.Request().Context(), id)
	if err != nil && !db.NotFound(err) {
		err = s.dbErr(c.Request().Context(), "3-D Secure page", err, false)
	}
	if err != nil {
		return s.notFoundOrFail(c, err)
	}
	in := toIntent(row)
	if in.Status != payment.StatusRequiresAction {
		return s.page(c, http.StatusOK, pageData{Title: "Nothing to confirm", Message: stateMessage(in.Status), Intent: in})
	}
	d := pageData{Title: "Confirm your payment", Form: true, Intent: in,
		Amount: money.FormatIn(in.AmountMinor, in.Currency) + " " + in.Currency}
	if s.opts.HoldUntil != nil {
		if until := s.opts.HoldUntil(c.Request().Context(), in.OrderID); until != nil {
			d.HeldUntil = until.UTC().Format("15:04:05 UTC")
		}
	}
	return s.page(c, http.StatusOK, d)
}

func (s *Sim) threeDSAnswer(c echo.Context) error {
	id := c.Param("intentId")
	var answer func(context.Context, string) (payment.Intent, error)
	switch c.FormValue("result") {
	case "approve":
		answer = s.Approve
	case "decline":
		answer = s.Decline
	default:
		return s.page(c, http.StatusBadRequest, pageData{Title: "Bad request",
			Message: `Send the form field result with "approve" or "decline".`})
	}
	// The shopper has answered: finish even if the browser goes away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 15*time.Second)
	defer cancel()
	in, err := answer(ctx, id)
	switch {
	case errors.Is(err, payment.ErrInvalidState):
		return s.page(c, http.StatusConflict, pageData{Title: "Payment no longer waiting",
			Message: stateMessage(in.Status), Intent: in})
	case err != nil:
		return s.notFoundOrFail(c, err)
	case in.Status == payment.StatusAuthorized:
		return s.page(c, http.StatusOK, pageData{Title: "Payment approved",
			Message: "Payment approved — you can close this page.", Intent: in})
	default:
		return s.page(c, http.StatusOK, pageData{Title: "Payment declined",
			Message: "Payment declined — you can close this page.", Intent: in})
	}
}

func (s *Sim) notFoundOrFail(c echo.Context, err error) error {
	if errors.Is(err, payment.ErrNotFound) || db.NotFound(err) {
		return s.page(c, http.StatusNotFound, pageData{Title: "Unknown payment",
			Message: "There is no payment waiting at this address."})
	}
	s.log.ErrorContext(c.Request().Context(), "3-D Secure page failed", "intent_id", c.Param("intentId"), "error", err)
	if errors.Is(err, payment.ErrUnavailable) || errors.Is(err, payment.ErrTimeout) {
		// The provider's own store is briefly out of reach: nothing was answered, or the answer
		// may stand; either way the same button again is safe.
		c.Response().Header().Set("Retry-After", retryAfterSeconds)
		return s.page(c, http.StatusServiceUnavailable, pageData{Title: "Please try again",
			Message: "The payment service is briefly unavailable. Please send your answer again in a few seconds."})
	}
	return s.page(c, http.StatusInternalServerError, pageData{Title: "Something went wrong",
		Message: "The payment could not be processed. Please try again."})
}

// retryAfterSeconds is the Retry-After of the page's 503, as the API's.
const retryAfterSeconds = "2"

// stateMessage tells the shopper why an intent cannot be answered any more.
func stateMessage(st payment.Status) string {
	switch st {
	case payment.StatusAuthorized, payment.StatusCaptured, payment.StatusRefunded:
		return "This payment was already approved. You can close this page."
	case payment.StatusDeclined:
		return "This payment was already declined. You can close this page."
	case payment.StatusVoided:
		return "This payment was cancelled (the order's reservation expired or the order was cancelled), so it can no longer be approved. No money was taken."
	}
	return "This payment is not waiting for confirmation."
}

func (s *Sim) page(c echo.Context, status int, d pageData) error {
	h := c.Response().Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	return pageTmpl.Execute(c.Response(), d)
}

// The page is self-contained (no external assets), so it works offline and under a strict CSP.
var pageTmpl = template.Must(template.New("3ds").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · Paysim Secure</title>
<style>
  body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: #f3f4f6; color: #111827; }
  header { background: #1f2937; color: #fff; padding: 14px 24px; display: flex; justify-content: space-between; align-items: center; }
  header .merchant { font-weight: 700; letter-spacing: .02em; }
  header .bank { font-size: 13px; opacity: .8; }
  main { max-width: 420px; margin: 40px auto; background: #fff; border-radius: 10px; padding: 28px; box-shadow: 0 1px 3px rgba(0,0,0,.12); }
  h1 { font-size: 20px; margin: 0 0 16px; }
  .amount { font-size: 32px; font-weight: 700; margin: 8px 0 20px; }
  dl { display: grid; grid-template-columns: auto 1fr; gap: 4px 16px; font-size: 14px; color: #4b5563; margin: 0 0 24px; }
  dd { margin: 0; word-break: break-all; }
  form { display: flex; gap: 12px; }
  button { flex: 1; font: inherit; font-weight: 600; padding: 12px; border: 0; border-radius: 8px; cursor: pointer; }
  .approve { background: #16a34a; color: #fff; }
  .decline { background: #e5e7eb; color: #111827; }
  .note { font-size: 12px; color: #6b7280; margin-top: 20px; }
</style>
</head>
<body>
<header><span class="merchant">Marketplace Checkout</span><span class="bank">Paysim Secure · 3-D Secure test bank</span></header>
<main>
<h1>{{.Title}}</h1>
{{- if .Form}}
<p>Confirm this payment to Marketplace Checkout.</p>
<div class="amount">{{.Amount}}</div>
<dl>
  <dt>Order</dt><dd>#{{.Intent.OrderID}}</dd>
  <dt>Payment</dt><dd>{{.Intent.ID}}</dd>
  {{- if .HeldUntil}}
  <dt>Items held until</dt><dd class="held">{{.HeldUntil}}</dd>
  {{- end}}
</dl>
<form method="post">
  <button type="submit" name="result" value="approve" class="approve">Approve</button>
  <button type="submit" name="result" value="decline" class="decline">Decline</button>
</form>
<p class="note">Payment simulator: no real card is charged.</p>
{{- else}}
<p>{{.Message}}</p>
{{- end}}
</main>
</body>
</html>
`))
