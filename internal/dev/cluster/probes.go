package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Listening is ready once addr accepts a connection.
func Listening(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// HTTPOK is ready once url answers 200.
func HTTPOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %d", url, resp.StatusCode)
		}
		return nil
	}
}

// ReplicaStatus is HAProxy's view of the API replica name (UP, DOWN, MAINT, …), from the stats
// page at stats (host:port) as CSV.
func ReplicaStatus(ctx context.Context, stats, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+stats+"/;csv", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	r := csv.NewReader(bufio.NewReader(resp.Body))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return "", fmt.Errorf("HAProxy's stats: %w", err)
	}
	if len(rows) == 0 {
		return "", errors.New("HAProxy's stats are empty")
	}
	status := slices.Index(rows[0], "status")
	if status < 0 {
		return "", errors.New("HAProxy's stats have no status column")
	}
	for _, row := range rows[1:] {
		if len(row) > status && row[0] == "api" && row[1] == name {
			return row[status], nil
		}
	}
	return "", fmt.Errorf("HAProxy does not know %s", name)
}

// frontendReady is ready once the frontend at addr answers its health check, asked with the
// tools' certificate.
func frontendReady(addr string, pki PKI) func(context.Context) error {
	return func(ctx context.Context) error {
		tlsCfg, err := pki.ClientTLS(IdentityTools)
		if err != nil {
			return err
		}
		c, err := client.DialContext(ctx, client.Options{HostPort: addr, Logger: quietLogger,
			ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}
}

// Retention is how long the namespace keeps closed workflows' histories.
const Retention = 72 * time.Hour

// EnsureNamespace registers namespace on the frontend at addr unless it exists, and waits until
// the frontend serves it (namespaces reach every frontend's cache within seconds). tlsCfg is the
// client's (nil: plaintext).
func EnsureNamespace(ctx context.Context, addr, namespace string, tlsCfg *tls.Config) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: addr, Logger: quietLogger,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
	if err != nil {
		return fmt.Errorf("temporal at %s: %w", addr, err)
	}
	defer nc.Close()
	err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: namespace,
		WorkflowExecutionRetentionPeriod: durationpb.New(Retention)})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("register namespace %s: %w", namespace, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := nc.Describe(ctx, namespace)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s not served after a minute: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// quietLogger keeps the SDK's dial retries out of the output while the server starts.
var quietLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// Alive is ready once the process has run for d without exiting: for a process with nothing to
// probe, so that one that exits at once (a setting it refuses) fails its start with its last line.
func Alive(d time.Duration) func(context.Context) error {
	var first time.Time
	var mu sync.Mutex
	return func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		if left := d - time.Since(first); left > 0 {
			return fmt.Errorf("running for %s, not yet %s", time.Since(first).Round(time.Millisecond), d)
		}
		return nil
	}
}
