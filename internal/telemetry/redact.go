package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// personal are the attributes instrumentations record that name a person or hold what they
// sent: the shopper's address and browser, the request's full target (its query), a statement's
// parameters. They never leave the process.
var personal = map[attribute.Key]bool{
	"client.address": true, "network.peer.address": true, "network.peer.port": true,
	"net.sock.peer.addr": true, "net.sock.peer.port": true, "http.client_ip": true,
	"user_agent.original": true, "http.user_agent": true, "http.target": true, "url.query": true,
	"url.full": true, "enduser.id": true, "db.query.parameters": true, "pgx.query.parameters": true,
}

// redacting is the exporter every span leaves through: it drops the personal attributes.
type redacting struct{ sdktrace.SpanExporter }

func (r redacting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redact(s)
	}
	return r.SpanExporter.ExportSpans(ctx, out)
}

func redact(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	attrs := s.Attributes()
	found := false
	for _, a := range attrs {
		if personal[a.Key] {
			found = true
			break
		}
	}
	if !found {
		return s
	}
	stub := tracetest.SpanStubFromReadOnlySpan(s)
	stub.Attributes = make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		if !personal[a.Key] {
			stub.Attributes = append(stub.Attributes, a)
		}
	}
	return stub.Snapshot()
}
