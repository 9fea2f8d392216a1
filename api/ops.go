package api

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/payment/paysim"
)

// PaymentFaults switches the payment simulator's injected faults: for load runs, demos and
// drills ("the provider is down for ten minutes: what does support see?").
type PaymentFaults interface {
	SetFaults(ctx context.Context, f paysim.Faults) error
	Faults(ctx context.Context) (paysim.Faults, error)
}

var _ PaymentFaults = (*paysim.Sim)(nil)

type faultsBody struct {
	// DownForSeconds takes the provider down from now on, for that long (0: up).
	DownForSeconds *float64 `json:"downForSeconds"`
	// MoneyDownForSeconds stops the provider moving money from now on, for that long, while it
	// still answers lookups (0: it moves money).
	MoneyDownForSeconds *float64 `json:"moneyDownForSeconds"`
	LatencyMs           *float64 `json:"latencyMs"`
	FailureRate         *float64 `json:"failureRate"`
}

type faultsView struct {
	DownUntil      *time.Time `json:"downUntil"`
	MoneyDownUntil *time.Time `json:"moneyDownUntil"`
	LatencyMs      float64    `json:"latencyMs"`
	FailureRate    float64    `json:"failureRate"`
}

func (s *Server) putPaymentFaults(c echo.Context) error {
	var b faultsBody
	if err := bind(c, &b); err != nil {
		return err
	}
	var v validation
	f := paysim.Faults{}
	f.DownUntil = v.until("downForSeconds", b.DownForSeconds)
	f.MoneyDownUntil = v.until("moneyDownForSeconds", b.MoneyDownForSeconds)
	if b.LatencyMs != nil {
		if *b.LatencyMs < 0 || *b.LatencyMs > 60000 || math.IsNaN(*b.LatencyMs) {
			v.add("latencyMs", "between 0 and 60000")
		} else {
			f.Latency = time.Duration(*b.LatencyMs * float64(time.Millisecond))
		}
	}
	if b.FailureRate != nil {
		if *b.FailureRate < 0 || *b.FailureRate > 1 || math.IsNaN(*b.FailureRate) {
			v.add("failureRate", "between 0 and 1")
		} else {
			f.FailureRate = *b.FailureRate
		}
	}
	if err := v.err(); err != nil {
		return err
	}
	if err := s.PaymentFaults.SetFaults(c.Request().Context(), f); err != nil {
		return err
	}
	s.Log.WarnContext(c.Request().Context(), "payment simulator faults changed", "user_id", mustPrincipal(c).UserID, "down_until", f.DownUntil,
		"money_down_until", f.MoneyDownUntil, "latency", f.Latency, "failure_rate", f.FailureRate)
	return s.getPaymentFaults(c)
}

func (s *Server) getPaymentFaults(c echo.Context) error {
	f, err := s.PaymentFaults.Faults(c.Request().Context())
	if err != nil {
		return err
	}
	out := faultsView{LatencyMs: float64(f.Latency) / float64(time.Millisecond), FailureRate: f.FailureRate}
	if f.DownUntil.After(time.Now()) {
		out.DownUntil = &f.DownUntil
	}
	if f.MoneyDownUntil.After(time.Now()) {
		out.MoneyDownUntil = &f.MoneyDownUntil
	}
	return c.JSON(http.StatusOK, out)
}

// until is the time seconds from now, for a fault that lasts that long (zero when seconds is
// absent or 0); it records field as invalid outside 0 to a day.
func (v *validation) until(field string, seconds *float64) time.Time {
	if seconds == nil || *seconds == 0 {
		return time.Time{}
	}
	if *seconds < 0 || *seconds > 86400 || math.IsNaN(*seconds) {
		v.add(field, "between 0 and 86400")
		return time.Time{}
	}
	return time.Now().Add(time.Duration(*seconds * float64(time.Second)))
}
