package telemetry

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// defaultKeeperLimit bounds the spans a process holds of traces not yet decided.
const defaultKeeperLimit = 20_000

// keptFor is how long a trace kept in this process lets its later spans through.
const keptFor = 5 * time.Minute

// keeper passes the spans of picked traces on to next and holds those of the others, grouped by
// their local root (the span whose parent is in another process, or none): when a span fails,
// or a local root other than a workflow run takes SlowAfter or longer, every held span of that
// trace is passed on, marked sampled, and so are its later ones in this process; a local root
// that ends otherwise drops its group. A workflow run's span lasts as long as the order waits
// for its shopper, so its length says nothing about the checkout's speed.
//
// Each process decides for its own spans: a trace kept by the worker because an activity failed
// may miss the API's spans when the API's part was quick and not picked.
type keeper struct {
	next  sdktrace.SpanProcessor
	slow  time.Duration
	limit int

	mu    sync.Mutex
	roots map[trace.SpanID]trace.SpanID // open span → its local root
	held  map[trace.SpanID]*group       // local root → its held spans
	kept  map[trace.TraceID]time.Time   // traces kept here, until when
	spans int
	order []trace.SpanID // groups by age, for the limit
	swept time.Time
}

type group struct {
	trace trace.TraceID
	spans []sdktrace.ReadOnlySpan
}

func newKeeper(next sdktrace.SpanProcessor, slow time.Duration, limit int) *keeper {
	return &keeper{next: next, slow: slow, limit: limit, roots: map[trace.SpanID]trace.SpanID{},
		held: map[trace.SpanID]*group{}, kept: map[trace.TraceID]time.Time{}}
}

var _ sdktrace.SpanProcessor = (*keeper)(nil)

func (k *keeper) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	sc := s.SpanContext()
	if sc.IsSampled() {
		k.next.OnStart(parent, s)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	root := sc.SpanID()
	if p := s.Parent(); p.IsValid() && !p.IsRemote() {
		if r, ok := k.roots[p.SpanID()]; ok {
			root = r
		}
	}
	k.roots[sc.SpanID()] = root
}

func (k *keeper) OnEnd(s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	if sc.IsSampled() {
		k.next.OnEnd(s)
		return
	}
	now := time.Now()
	k.mu.Lock()
	id := sc.TraceID()
	root, ok := k.roots[sc.SpanID()]
	if !ok {
		root = sc.SpanID()
	}
	delete(k.roots, sc.SpanID())
	if until, ok := k.kept[id]; ok && now.Before(until) {
		k.mu.Unlock()
		k.next.OnEnd(sampled(s))
		return
	}
	g := k.held[root]
	if g == nil {
		g = &group{trace: id}
		k.held[root] = g
		k.order = append(k.order, root)
	}
	g.spans = append(g.spans, s)
	k.spans++
	isRoot := root == sc.SpanID()
	var out []sdktrace.ReadOnlySpan
	switch {
	case s.Status().Code == codes.Error || (isRoot && k.isSlow(s)):
		k.kept[id] = now.Add(keptFor)
		for r, h := range k.held {
			if h.trace == id {
				out = append(out, h.spans...)
				k.drop(r)
			}
		}
	case isRoot:
		k.drop(root)
	}
	k.bound(now)
	k.mu.Unlock()
	for _, s := range out {
		k.next.OnEnd(sampled(s))
	}
}

// isSlow: a local root that took SlowAfter or longer, unless it is a workflow run.
func (k *keeper) isSlow(s sdktrace.ReadOnlySpan) bool {
	return k.slow > 0 && s.EndTime().Sub(s.StartTime()) >= k.slow && !strings.HasPrefix(s.Name(), "RunWorkflow:")
}

// drop forgets a group (the caller holds mu).
func (k *keeper) drop(root trace.SpanID) {
	if g, ok := k.held[root]; ok {
		k.spans -= len(g.spans)
		delete(k.held, root)
	}
}

// bound drops the oldest groups past the limit and forgets kept traces past their time (the
// caller holds mu).
func (k *keeper) bound(now time.Time) {
	for k.spans > k.limit && len(k.order) > 0 {
		k.drop(k.order[0])
		k.order = k.order[1:]
	}
	if len(k.order) > 2*len(k.held)+64 {
		live := k.order[:0]
		for _, r := range k.order {
			if _, ok := k.held[r]; ok {
				live = append(live, r)
			}
		}
		k.order = live
	}
	if now.Sub(k.swept) > time.Minute {
		k.swept = now
		for id, until := range k.kept {
			if now.After(until) {
				delete(k.kept, id)
			}
		}
	}
}

func (k *keeper) Shutdown(ctx context.Context) error   { return k.next.Shutdown(ctx) }
func (k *keeper) ForceFlush(ctx context.Context) error { return k.next.ForceFlush(ctx) }

// keptKey marks a span exported because its trace failed or was slow, not because it was picked.
const keptKey = attribute.Key("checkout.trace.kept")

// sampled is s marked sampled (the batch processor sends only those) and as kept.
func sampled(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	stub := tracetest.SpanStubFromReadOnlySpan(s)
	stub.SpanContext = stub.SpanContext.WithTraceFlags(stub.SpanContext.TraceFlags().WithSampled(true))
	stub.Attributes = append(stub.Attributes, keptKey.Bool(true))
	return stub.Snapshot()
}
