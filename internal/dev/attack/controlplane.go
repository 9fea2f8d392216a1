package attack

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/workflows"
)

// dialTemporal connects to the target's frontend with opts (HostPort and Namespace filled in), the
// SDK's own (plaintext) data converter and no logs.
func (r *Run) dialTemporal(ctx context.Context, opts client.Options) (client.Client, error) {
	opts.HostPort, opts.Namespace = r.T.TemporalAddress, r.T.Namespace
	opts.DataConverter = converter.GetDefaultDataConverter()
	opts.Logger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	return client.DialContext(ctx, opts)
}

// frontendRefuses: a caller with opts (no credentials of the product's) cannot list the
// namespace's workflows.
func (r *Run) frontendRefuses(ctx context.Context, opts client.Options) Outcome {
	d := net.Dialer{Timeout: 3 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", r.T.TemporalAddress)
	if err != nil {
		return fail("the frontend at %s is not listening: %v", r.T.TemporalAddress, err)
	}
	conn.Close()
	c, err := r.dialTemporal(ctx, opts)
	if err != nil {
		return pass("refused at connection: %s", short(err.Error(), 80))
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.ListWorkflow(ctx, nil); err != nil {
		return pass("refused: %s", short(err.Error(), 80))
	}
	return fail("listed the workflows of namespace %s", r.T.Namespace)
}

// bearerHeaders sends a bearer token with every call, as a client of the authorizer does.
type bearerHeaders string

func (b bearerHeaders) GetHeaders(context.Context) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// uiRefuses: the UI's API does not list the namespace's workflows for the request.
func (r *Run) uiRefuses(ctx context.Context, token string) Outcome {
	if r.T.TemporalUI == "" {
		return fail("the target names no Temporal UI")
	}
	a, err := r.do(ctx, request{method: http.MethodGet, base: r.T.TemporalUI,
		path: "/api/v1/namespaces/" + r.T.Namespace + "/workflows", token: token})
	if err != nil {
		return failed("request", err)
	}
	if a.status == http.StatusOK {
		return fail("the UI listed the workflows: %s", a)
	}
	return pass("%d", a.status)
}

var controlPlaneAttacks = []Attack{
	{Name: "temporal-frontend-unauthenticated", Kind: KindTemporal, What: "a caller without a certificate or token cannot list workflows",
		Run: func(ctx context.Context, r *Run) Outcome { return r.frontendRefuses(ctx, client.Options{}) }},
	{Name: "temporal-frontend-shopper", Kind: KindTemporal, What: "a shopper's token at the frontend cannot list workflows",
		Run: func(ctx context.Context, r *Run) Outcome {
			return r.frontendRefuses(ctx, client.Options{HeadersProvider: bearerHeaders(r.shopper(500))})
		}},
	{Name: "temporal-ui-unauthenticated", Kind: KindTemporalUI, What: "the UI shows no workflow to a browser that has not signed in",
		Run: func(ctx context.Context, r *Run) Outcome { return r.uiRefuses(ctx, "") }},
	{Name: "temporal-ui-shopper", Kind: KindTemporalUI,
		What: "the UI shows no workflow to a shopper: signed in at the identity provider, or with a shopper's token of the API",
		Run: func(ctx context.Context, r *Run) Outcome {
			token := r.shopper(500)
			if r.T.PersonToken != nil {
				var err error
				if token, err = r.T.PersonToken(ctx, auth.RoleShopper); err != nil {
					return pass("the shopper's sign-in was refused: %s", short(err.Error(), 80))
				}
			}
			return r.uiRefuses(ctx, token)
		}},
	{Name: "worker-plaintext-signal", Kind: KindWorker,
		What: "a support cancel sent in plaintext (not encoded by a trusted client) is not obeyed: the order waits on",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			c, err := r.dialTemporal(ctx, r.T.TemporalOptions)
			if err != nil {
				return failed("connecting as a trusted client", err)
			}
			defer c.Close()
			err = c.SignalWorkflow(ctx, workflows.OrderWorkflowID(r.user(1), f.orderKey), "", workflows.SupportAction,
				map[string]string{"action": "cancel", "reason": "plaintext from the attack suite"})
			if err != nil {
				return failed("signal", err)
			}
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
				status, err := r.orderStatus(ctx, f.a, f.order)
				if err != nil {
					return failed("reading the order", err)
				}
				if status != "PENDING_PAYMENT" {
					return fail("the order became %s on a plaintext signal", status)
				}
			}
			return pass("the order still waits")
		})},
}
