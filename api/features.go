package api

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/features"
)

// featureView is a feature switch as ops see it.
type featureView struct {
	Name      string     `json:"name"`
	Enabled   bool       `json:"enabled"`
	WhenOff   string     `json:"whenOff"`
	UpdatedAt *time.Time `json:"updatedAt"`
	UpdatedBy *string    `json:"updatedBy"`
}

// getFeatures answers every feature switch as PostgreSQL holds it, with who last set it when.
func (s *Server) getFeatures(c echo.Context) error {
	states, err := s.Features.States(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]featureView, len(states))
	for i, st := range states {
		out[i] = featureView{Name: string(st.Name), Enabled: st.Enabled, WhenOff: st.WhenOff, UpdatedAt: st.UpdatedAt,
			UpdatedBy: st.UpdatedBy}
	}
	return c.JSON(http.StatusOK, map[string]any{"features": out})
}

// putFeatures turns switches on or off ({"cart_stock_hints": false, ...}); the switches it does
// not name stay as they are. Every API and worker process follows within FEATURES_CACHE_TTL.
func (s *Server) putFeatures(c echo.Context) error {
	var body map[string]*bool
	if err := bind(c, &body); err != nil {
		return err
	}
	var v validation
	if len(body) == 0 {
		v.add("body", "name at least one switch: {\"cart_stock_hints\": false}")
	}
	to := make(map[features.Name]bool, len(body))
	for name, on := range body {
		switch {
		case !features.Known(features.Name(name)):
			v.add(name, "not a feature switch; the switches are "+switchNames())
		case on == nil:
			v.add(name, "true (on) or false (off)")
		default:
			to[features.Name(name)] = *on
		}
	}
	sort.Slice(v, func(i, j int) bool { return v[i].Field < v[j].Field })
	if err := v.err(); err != nil {
		return err
	}
	p := mustPrincipal(c)
	changed, err := s.Features.Set(c.Request().Context(), to, "ops:"+strconv.FormatInt(p.UserID, 10))
	if err != nil {
		return err
	}
	if len(changed) > 0 {
		names := make([]string, len(changed))
		for i, n := range changed {
			names[i] = string(n) + "=" + strconv.FormatBool(to[n])
		}
		s.Log.WarnContext(c.Request().Context(), "feature switches changed", "user_id", p.UserID, "request_id", requestID(c),
			"changed", strings.Join(names, ","))
	}
	return s.getFeatures(c)
}

func switchNames() string {
	names := make([]string, len(features.All))
	for i, sw := range features.All {
		names[i] = string(sw.Name)
	}
	return strings.Join(names, ", ")
}
