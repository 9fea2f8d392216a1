package metrics

import "github.com/prometheus/client_golang/prometheus"

// CacheFigures are the API process's read caches' counters and state, read at scrape time: the
// cart cache (cart documents, kept coherent by notices on the event broker) and the verified-token
// cache.
type CacheFigures struct {
	// CartEnabled: the process has a cart cache (CART_CACHE_ENTRIES > 0).
	CartEnabled                             bool
	CartHits, CartMisses, CartNotifications uint64
	CartEvictedChanged, CartEvictedCapacity uint64
	CartResets, CartReconnects              uint64
	CartEntries                             int
	CartBytes                               int64
	CartListening                           bool
	// TokenEnabled: the process caches verified tokens (AUTH_TOKEN_CACHE_ENTRIES > 0).
	TokenEnabled           bool
	TokenHits, TokenMisses uint64
	TokenEntries           int
}

// RegisterCaches exports the figures read through read at each scrape.
func (m *Metrics) RegisterCaches(read func() CacheFigures) {
	m.Registry.MustRegister(&cacheCollector{read: read})
}

var (
	cartHitsDesc = prometheus.NewDesc("checkout_cart_cache_hits_total",
		"Cart reads answered from the API process's cart cache.", nil, nil)
	cartMissesDesc = prometheus.NewDesc("checkout_cart_cache_misses_total",
		"Cart reads that went to the database (not cached, too old, or the cache not subscribed).", nil, nil)
	cartNotificationsDesc = prometheus.NewDesc("checkout_cart_cache_notifications_total",
		"Cart notices (changes announced by API processes) the cart cache applied.", nil, nil)
	cartEvictionsDesc = prometheus.NewDesc("checkout_cart_cache_evictions_total",
		"Cart cache entries dropped, by reason: changed (the cart changed elsewhere), capacity (bounds).",
		[]string{"reason"}, nil)
	cartResetsDesc = prometheus.NewDesc("checkout_cart_cache_resets_total",
		"Times the whole cart cache was cleared (its subscription to the cart notices lost).", nil, nil)
	cartReconnectsDesc = prometheus.NewDesc("checkout_cart_cache_reconnects_total",
		"Subscriptions to the cart notices the cart cache made after its first.", nil, nil)
	cartEntriesDesc = prometheus.NewDesc("checkout_cart_cache_entries",
		"Carts held in the cart cache.", nil, nil)
	cartBytesDesc = prometheus.NewDesc("checkout_cart_cache_bytes",
		"Estimated memory of the carts held in the cart cache.", nil, nil)
	cartListeningDesc = prometheus.NewDesc("checkout_cart_cache_listening",
		"1 while the cart cache is subscribed to the cart notices and may serve; 0 while it is bypassed.", nil, nil)
	tokenHitsDesc = prometheus.NewDesc("checkout_auth_token_cache_hits_total",
		"Bearer tokens accepted from the verified-token cache.", nil, nil)
	tokenMissesDesc = prometheus.NewDesc("checkout_auth_token_cache_misses_total",
		"Bearer tokens checked in full (signature and claims).", nil, nil)
	tokenEntriesDesc = prometheus.NewDesc("checkout_auth_token_cache_entries",
		"Verified tokens held in the token cache.", nil, nil)
)

type cacheCollector struct{ read func() CacheFigures }

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cartHitsDesc, cartMissesDesc, cartNotificationsDesc, cartEvictionsDesc,
		cartResetsDesc, cartReconnectsDesc, cartEntriesDesc, cartBytesDesc, cartListeningDesc,
		tokenHitsDesc, tokenMissesDesc, tokenEntriesDesc} {
		ch <- d
	}
}

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.read()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	if f.CartEnabled {
		counter(cartHitsDesc, f.CartHits)
		counter(cartMissesDesc, f.CartMisses)
		counter(cartNotificationsDesc, f.CartNotifications)
		counter(cartEvictionsDesc, f.CartEvictedChanged, "changed")
		counter(cartEvictionsDesc, f.CartEvictedCapacity, "capacity")
		counter(cartResetsDesc, f.CartResets)
		counter(cartReconnectsDesc, f.CartReconnects)
		gauge(cartEntriesDesc, float64(f.CartEntries))
		gauge(cartBytesDesc, float64(f.CartBytes))
		listening := 0.0
		if f.CartListening {
			listening = 1
		}
		gauge(cartListeningDesc, listening)
	}
	if f.TokenEnabled {
		counter(tokenHitsDesc, f.TokenHits)
		counter(tokenMissesDesc, f.TokenMisses)
		gauge(tokenEntriesDesc, float64(f.TokenEntries))
	}
}

// RegisterFeatures exports the feature switches as this process sees them (read through read at
// each scrape, from its cache): 1 on, 0 off, by switch.
func (m *Metrics) RegisterFeatures(read func() map[string]bool) {
	m.Registry.MustRegister(&featureCollector{read: read})
}

var featureDesc = prometheus.NewDesc("checkout_feature_enabled",
	"Feature switches as this process sees them (FEATURES_CACHE_TTL behind the database at most): 1 on, 0 off.",
	[]string{"feature"}, nil)

type featureCollector struct{ read func() map[string]bool }

func (c *featureCollector) Describe(ch chan<- *prometheus.Desc) { ch <- featureDesc }

func (c *featureCollector) Collect(ch chan<- prometheus.Metric) {
	for name, on := range c.read() {
		v := 0.0
		if on {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(featureDesc, prometheus.GaugeValue, v, name)
	}
}
