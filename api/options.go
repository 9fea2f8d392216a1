package api

import (
	"github.com/marketplace/checkout/webhooks"
	"net"
	"time"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
)

// Options are the API's own settings, read from the environment by internal/config and handed
// to the API alone (internal/wiring). What an order holds and how its steps retry are the
// worker's, never the API's.
type Options struct {
	// TaskQueue is where the API starts order and line cancellation workflows.
	TaskQueue string
	// PublicBaseURL is how browsers reach the API: the codec endpoint's session page and cookie.
	PublicBaseURL string
	// TemporalUIOrigins are the Temporal UI's origins, which may call the codec endpoint from a
	// browser with support's session cookie.
	TemporalUIOrigins []string

	// AuthKeys sign and check the bearer tokens (and, through a key derived from them, the guest
	// cart tokens); AuthTokenCacheEntries bounds the verified tokens remembered (0: none).
	AuthKeys              auth.Keys
	AuthTokenCacheEntries int
	// PaymentWebhookSecret checks the signature of the provider's webhooks.
	PaymentWebhookSecret string

	// RateLimits are the per-process rate limits; TrustedProxies the proxies whose
	// X-Forwarded-For names the client (none: the connection's peer is the client).
	RateLimits     config.RateLimits
	TrustedProxies []*net.IPNet
	// OrdersMaxInFlight and OrdersAdmitMaxLatency are the admission control of POST /orders (0:
	// no bound, not watched).
	OrdersMaxInFlight     int
	OrdersAdmitMaxLatency time.Duration
	// WorkflowTaskTimeout is the workflow task timeout of the workflows the API starts (0: the
	// SDK's).
	WorkflowTaskTimeout time.Duration
	// FeaturesCacheTTL is how long the API trusts its read of the feature switches, when the
	// process gives it none (Deps.Features).
	FeaturesCacheTTL time.Duration

	// CartLimits bound a cart's lines and a line's units; CartViewCacheTTL is how long the cart
	// page reuses a SKU's price and stock hint (0: never); at or below LowStockThreshold sellable
	// units, the cart and the preview warn LOW_STOCK.
	CartLimits        cart.Limits
	CartViewCacheTTL  time.Duration
	LowStockThreshold int

	// WebhookTargets are where sellers' endpoints may point (outside dev: public https only);
	// WebhookSecretOverlap is how long a rotated secret keeps signing beside the new one.
	WebhookTargets       webhooks.Targets
	WebhookSecretOverlap time.Duration
}
