// Package natsserver runs the pinned nats-server (bin/nats-server, built by the Makefile from the
// Go module) with JetStream as a child process, for `dev` and the tests; Args are the same flags
// `make cluster` and deploy/ give each node of a three-node cluster.
package natsserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/dev/childproc"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// Version is the nats-server the Makefile builds (NATS_SERVER_VERSION) and deploy/ runs.
const Version = "v2.15.2"

// Options describe one server.
type Options struct {
	// Binary is the nats-server program (bin/nats-server).
	Binary string
	// Name is the server's name (required in a cluster).
	Name string
	// Dir holds the JetStream store.
	Dir string
	// Host is where it listens (127.0.0.1).
	Host string
	// Port is the client port; 0 picks a free one. MonitorPort serves /healthz, /varz, /jsz
	// (0: a free one).
	Port, MonitorPort int
	// Cluster, when set, makes the server a node of a JetStream cluster of that name: it listens
	// for routes on ClusterPort and joins Routes (host:port of every node, itself included).
	Cluster     string
	ClusterPort int
	Routes      []string
	// Log receives the server's output; nil keeps it to quote should it fail to start.
	Log io.Writer
}

// Args are the server's flags: JetStream on, its store in Dir, listeners on Host.
func Args(o Options) []string {
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	args := []string{"--jetstream", "--store_dir", o.Dir, "--addr", host, "--port", strconv.Itoa(o.Port),
		"--http_port", strconv.Itoa(o.MonitorPort)}
	if o.Name != "" {
		args = append(args, "--server_name", o.Name)
	}
	if o.Cluster != "" {
		var routes []string
		for _, r := range o.Routes {
			routes = append(routes, "nats://"+r)
		}
		args = append(args, "--cluster_name", o.Cluster,
			"--cluster", "nats://"+net.JoinHostPort(host, strconv.Itoa(o.ClusterPort)),
			"--routes", strings.Join(routes, ","))
	}
	return args
}

// Server is a running server.
type Server struct {
	URL        string
	MonitorURL string
	Dir        string
	proc       *childproc.Process
}

// Find resolves the nats-server binary: the given path, then bin/nats-server walking up from the
// working directory (tests run in package folders), then PATH.
func Find(path string) (string, error) {
	if path == "" {
		path = "bin/nats-server"
	}
	if filepath.IsAbs(path) {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	} else if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, path); fileExists(p) {
				return p, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("nats-server not found at %s: run `make nats-server` (builds the pinned %s)", path, Version)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start runs the server and waits until JetStream answers on its monitoring endpoint.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := Find(o.Binary)
	if err != nil {
		return nil, err
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	for _, p := range []*int{&o.Port, &o.MonitorPort} {
		if *p == 0 {
			if *p, err = pgserver.FreePort(); err != nil {
				return nil, err
			}
		} else if inUse(o.Host, *p) {
			return nil, fmt.Errorf("port %d is in use (another nats-server?): set NATS_PORT and NATS_MONITOR_PORT", *p)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	proc, err := childproc.Start("nats-server", exec.Command(bin, Args(o)...), o.Log)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "nats://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port)),
		MonitorURL: "http://" + net.JoinHostPort(o.Host, strconv.Itoa(o.MonitorPort)), Dir: o.Dir, proc: proc}
	if err := proc.WaitReady(ctx, 30*time.Second, func(ctx context.Context) error { return Healthy(ctx, s.MonitorURL) }); err != nil {
		proc.Stop()
		return nil, err
	}
	return s, nil
}

// Healthy asks the monitoring endpoint whether the server and its JetStream are up.
func Healthy(ctx context.Context, monitorURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitorURL+"/healthz?js-enabled-only=true", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/healthz: %s", monitorURL, resp.Status)
	}
	return nil
}

// Stop ends the server (SIGTERM, then its group is killed); its store stays.
func (s *Server) Stop() {
	if s != nil {
		s.proc.Stop()
	}
}

// Kill ends the server at once (SIGKILL), as a crash would; its store stays.
func (s *Server) Kill() {
	if s != nil {
		s.proc.Kill()
	}
}

func inUse(host string, port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
