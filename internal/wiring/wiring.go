// Package wiring hands each part of a process the options it declares, read from the one
// config.Config: the binary (cmd/checkout) wires its processes with it and the tests wire theirs
// the same way, so that no part sees the whole Config, and a setting given to the wrong process
// reaches nothing. The worker wires its own parts (package worker).
package wiring

import (
	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/webhooks"
)

// API is the API's options.
func API(cfg config.Config) api.Options {
	return api.Options{TaskQueue: cfg.TaskQueue, PublicBaseURL: cfg.PublicBaseURL, TemporalUIOrigins: cfg.TemporalUIOrigins,
		AuthKeys: cfg.AuthKeys(), AuthTokenCacheEntries: cfg.AuthTokenCacheEntries,
		PaymentWebhookSecret: cfg.PaymentWebhookSecret, RateLimits: cfg.RateLimits, TrustedProxies: cfg.TrustedProxies,
		OrdersMaxInFlight: cfg.OrdersMaxInFlight, OrdersAdmitMaxLatency: cfg.OrdersAdmitMaxLatency,
		WorkflowTaskTimeout: cfg.WorkflowTaskTimeout,
		FeaturesCacheTTL:    cfg.FeaturesCacheTTL,
		CartLimits:          cart.Limits{MaxLines: cfg.CartMaxLines, MaxUnitsPerLine: int32(cfg.CartMaxUnitsPerLine)},
		CartViewCacheTTL:    cfg.CartViewCacheTTL, LowStockThreshold: cfg.LowStockThreshold,
		WebhookTargets:       webhooks.Targets{AllowPrivate: cfg.Webhooks.AllowPrivateTargets},
		WebhookSecretOverlap: cfg.Webhooks.SecretOverlap}
}

// Events is the event broker's options of a process (name: its connection's name on the broker).
func Events(cfg config.Config, name string) events.Options {
	return events.Options{URL: cfg.Events.NATSURL, Prefix: cfg.Events.Prefix, Replicas: cfg.Events.Replicas,
		MaxAge: cfg.Events.MaxAge, MaxBytes: cfg.Events.MaxBytes, Name: name}
}
