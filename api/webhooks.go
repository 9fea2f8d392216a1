package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/webhooks"
)

// webhookRoutes are the sellers' webhook endpoints (their own, under the seller API) and ops'
// view of every seller's, with the delivery log and replay.
func (s *Server) webhookRoutes(e *echo.Echo, seller *echo.Group) {
	seller.POST("/webhooks", s.createWebhook)
	seller.GET("/webhooks", s.listWebhooks)
	seller.GET("/webhooks/:endpointId", s.getWebhook)
	seller.PATCH("/webhooks/:endpointId", s.patchWebhook)
	seller.DELETE("/webhooks/:endpointId", s.deleteWebhook)
	seller.POST("/webhooks/:endpointId/secret/rotate", s.rotateWebhookSecret)
	seller.GET("/webhooks/:endpointId/deliveries", s.listWebhookDeliveries)
	seller.GET("/webhooks/:endpointId/deliveries/:deliveryId", s.getWebhookDelivery)
	seller.POST("/webhooks/:endpointId/deliveries/:deliveryId/replay", s.replayWebhookDelivery)
	ops := e.Group("/api/v1/ops/webhooks", s.authenticate, requireRole(auth.RoleOps))
	ops.GET("", s.listWebhooks)
	ops.GET("/:endpointId/deliveries", s.listWebhookDeliveries)
	ops.GET("/:endpointId/deliveries/:deliveryId", s.getWebhookDelivery)
	ops.POST("/:endpointId/deliveries/:deliveryId/replay", s.replayWebhookDelivery)
}

func (s *Server) webhookEndpoints() webhooks.Endpoints {
	return webhooks.Endpoints{Pool: s.Pool, Targets: s.Options.WebhookTargets, SecretOverlap: s.Options.WebhookSecretOverlap}
}

type webhookBody struct {
	URL         *string  `json:"url"`
	EventTypes  []string `json:"eventTypes"`
	Description *string  `json:"description"`
	// Status: ENABLED or DISABLED (PATCH only).
	Status *string `json:"status"`
}

// webhookAnswer is an endpoint, with its secret when one was just made (shown once).
type webhookAnswer struct {
	webhooks.Endpoint
	Secret string `json:"secret,omitempty"`
}

// webhookError maps the webhooks package's refusals to the error model.
func webhookError(err error) error {
	var inv *webhooks.InvalidError
	switch {
	case errors.As(err, &inv) && inv.Forbidden:
		return problem.Wrap(err, problem.WebhookTargetForbidden, "the endpoint's address is not a public one: webhooks go to the seller's own servers only").
			WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: inv.Field, Message: inv.Message}}})
	case errors.As(err, &inv):
		return problem.New(problem.ValidationFailed, "some fields are invalid").WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: inv.Field, Message: inv.Message}}})
	case errors.Is(err, webhooks.ErrNotFound):
		return problem.New(problem.NotFound, "no such webhook endpoint or delivery")
	case errors.Is(err, webhooks.ErrTooMany):
		return problem.New(problem.LimitReached, "a seller has at most 10 webhook endpoints")
	}
	return err
}

// sellerOf is whose endpoints the request acts on: a seller's own; ops', the endpoint's seller.
func (s *Server) sellerOf(c echo.Context) (int64, error) {
	p := mustPrincipal(c)
	if p.Role == auth.RoleSeller {
		return p.SellerID, nil
	}
	id, err := pathID(c, "endpointId")
	if err != nil {
		return 0, err
	}
	seller, err := s.webhookEndpoints().Owner(c.Request().Context(), id)
	return seller, webhookError(err)
}

func pathID(c echo.Context, name string) (int64, error) {
	id, err := strconv.ParseInt(c.Param(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "no such webhook endpoint or delivery")
	}
	return id, nil
}

func (s *Server) createWebhook(c echo.Context) error {
	var b webhookBody
	if err := bind(c, &b); err != nil {
		return err
	}
	var v validation
	if b.URL == nil {
		v.add("url", "required")
	}
	if b.Status != nil {
		v.add("status", "a new endpoint is ENABLED; change it with PATCH")
	}
	if err := v.err(); err != nil {
		return err
	}
	spec := webhooks.Spec{URL: *b.URL, EventTypes: b.EventTypes}
	if b.Description != nil {
		spec.Description = *b.Description
	}
	ep, secret, err := s.webhookEndpoints().Create(c.Request().Context(), mustPrincipal(c).SellerID, spec)
	if err != nil {
		return webhookError(err)
	}
	return c.JSON(http.StatusCreated, webhookAnswer{Endpoint: ep, Secret: secret})
}

func (s *Server) listWebhooks(c echo.Context) error {
	p := mustPrincipal(c)
	seller, all := p.SellerID, false
	if p.Role == auth.RoleOps {
		all = true
		seller = 0
		if q := c.QueryParam("sellerId"); q != "" {
			n, err := strconv.ParseInt(q, 10, 64)
			if err != nil || n <= 0 {
				return problem.New(problem.ValidationFailed, "some fields are invalid").
					WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "sellerId", Message: "a seller id"}}})
			}
			seller = n
		}
	}
	eps, err := s.webhookEndpoints().List(c.Request().Context(), seller, all)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"endpoints": eps})
}

func (s *Server) getWebhook(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	ep, err := s.webhookEndpoints().Get(c.Request().Context(), mustPrincipal(c).SellerID, id)
	if err != nil {
		return webhookError(err)
	}
	return c.JSON(http.StatusOK, ep)
}

func (s *Server) patchWebhook(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	var b webhookBody
	if err := bind(c, &b); err != nil {
		return err
	}
	ctx, seller, store := c.Request().Context(), mustPrincipal(c).SellerID, s.webhookEndpoints()
	ep, err := store.Get(ctx, seller, id)
	if err != nil {
		return webhookError(err)
	}
	if b.URL != nil || b.EventTypes != nil || b.Description != nil {
		spec := webhooks.Spec{URL: ep.URL, EventTypes: ep.EventTypes, Description: ep.Description}
		if b.URL != nil {
			spec.URL = *b.URL
		}
		if b.EventTypes != nil {
			spec.EventTypes = b.EventTypes
		}
		if b.Description != nil {
			spec.Description = *b.Description
		}
		if ep, err = store.Update(ctx, seller, id, spec); err != nil {
			return webhookError(err)
		}
	}
	if b.Status != nil {
		switch *b.Status {
		case webhooks.StatusEnabled, webhooks.StatusDisabled:
		default:
			return problem.New(problem.ValidationFailed, "some fields are invalid").
				WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "status", Message: "ENABLED or DISABLED"}}})
		}
		if ep, err = store.SetEnabled(ctx, seller, id, *b.Status == webhooks.StatusEnabled); err != nil {
			return webhookError(err)
		}
	}
	return c.JSON(http.StatusOK, ep)
}

func (s *Server) deleteWebhook(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	if err := s.webhookEndpoints().Delete(c.Request().Context(), mustPrincipal(c).SellerID, id); err != nil {
		return webhookError(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) rotateWebhookSecret(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	secret, until, err := s.webhookEndpoints().RotateSecret(c.Request().Context(), mustPrincipal(c).SellerID, id)
	if err != nil {
		return webhookError(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"secret": secret, "previousSecretExpiresAt": until})
}

func (s *Server) listWebhookDeliveries(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	seller, err := s.sellerOf(c)
	if err != nil {
		return err
	}
	var v validation
	limit, before := int64(50), int64(0)
	if q := c.QueryParam("limit"); q != "" {
		if limit, err = strconv.ParseInt(q, 10, 32); err != nil || limit < 1 || limit > 200 {
			v.add("limit", "between 1 and 200")
		}
	}
	if q := c.QueryParam("before"); q != "" {
		if before, err = strconv.ParseInt(q, 10, 64); err != nil || before < 1 {
			v.add("before", "a delivery id")
		}
	}
	status := c.QueryParam("status")
	switch status {
	case "", webhooks.DeliveryPending, webhooks.DeliveryDelivered, webhooks.DeliveryFailed:
	default:
		v.add("status", "PENDING, DELIVERED or FAILED")
	}
	if err := v.err(); err != nil {
		return err
	}
	ds, err := s.webhookEndpoints().Deliveries(c.Request().Context(), seller, id, status, before, int32(limit))
	if err != nil {
		return webhookError(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"deliveries": ds})
}

func (s *Server) getWebhookDelivery(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	delivery, err := pathID(c, "deliveryId")
	if err != nil {
		return err
	}
	seller, err := s.sellerOf(c)
	if err != nil {
		return err
	}
	d, err := s.webhookEndpoints().Delivery(c.Request().Context(), seller, id, delivery)
	if err != nil {
		return webhookError(err)
	}
	return c.JSON(http.StatusOK, struct {
		webhooks.Delivery
		Body json.RawMessage `json:"body"`
	}{d, d.Body})
}

func (s *Server) replayWebhookDelivery(c echo.Context) error {
	id, err := pathID(c, "endpointId")
	if err != nil {
		return err
	}
	delivery, err := pathID(c, "deliveryId")
	if err != nil {
		return err
	}
	seller, err := s.sellerOf(c)
	if err != nil {
		return err
	}
	if err := s.webhookEndpoints().Replay(c.Request().Context(), seller, id, delivery); err != nil {
		return webhookError(err)
	}
	return c.JSON(http.StatusAccepted, map[string]any{"deliveryId": delivery, "status": webhooks.DeliveryPending})
}
