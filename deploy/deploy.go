// Package deploy holds the configuration of a deployment, embedded in the harness's binary so that
// `checkout-dev cluster` runs on the very files docker-compose.yml mounts into its containers: the
// Temporal server's config and dynamic config, the load balancer's with its error answer, and
// Jaeger's.
package deploy

import "embed"

// The files, by name.
const (
	TemporalServer        = "temporal-server.yaml"
	TemporalDynamicConfig = "temporal-dynamicconfig.yaml"
	HAProxy               = "haproxy.cfg"
	// HAProxyUnavailable is HAProxy's answer when no replica can answer (HAPROXY_UNAVAILABLE).
	HAProxyUnavailable = "haproxy-unavailable.http"
	// Jaeger is the traces' store and UI (its addresses from the environment), and JaegerUI the
	// traces' page bin/jaeger serves (JAEGER_UI_ASSETS is its folder).
	Jaeger   = "jaeger.yaml"
	JaegerUI = "jaeger-ui/index.html"
)

//go:embed temporal-server.yaml temporal-dynamicconfig.yaml haproxy.cfg haproxy-unavailable.http jaeger.yaml jaeger-ui/index.html
var Files embed.FS
