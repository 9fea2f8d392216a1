package api

import (
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/internal/auth"
)

const principalKey = "principal"

// authenticate accepts `Authorization: Bearer <JWT>` and stores the principal; anything else is
// 401.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, present, err := s.bearer(c)
		if !present {
			return unauthorized("missing bearer token")
		}
		if err != nil {
			return unauthorized("invalid or expired token")
		}
		c.Set(principalKey, p)
		return next(c)
	}
}

// bearer reads and verifies the bearer token, if the request carries one.
func (s *Server) bearer(c echo.Context) (p auth.Principal, present bool, err error) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if h == "" {
		return p, false, nil
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return p, true, errBadScheme
	}
	p, err = s.tokens.Verify(strings.TrimSpace(token))
	return p, true, err
}

var errBadScheme = unauthorized("use Authorization: Bearer <token>")

// requireRole lets through only principals with one of the roles (403 otherwise).
func requireRole(roles ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p, ok := principal(c)
			if !ok {
				return unauthorized("missing bearer token")
			}
			for _, r := range roles {
				if p.Role == r {
					return next(c)
				}
			}
			return forbidden("this endpoint is for the " + strings.Join(roles, " or ") + " role")
		}
	}
}

func principal(c echo.Context) (auth.Principal, bool) {
	p, ok := c.Get(principalKey).(auth.Principal)
	return p, ok
}

func mustPrincipal(c echo.Context) auth.Principal {
	p, _ := principal(c)
	return p
}
