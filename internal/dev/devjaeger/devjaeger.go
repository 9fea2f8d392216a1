// Package devjaeger runs the pinned Jaeger (bin/jaeger, built by the Makefile from its Go module)
// as a child process of `dev` and of the tests, on loopback, with deploy/jaeger.yaml: traces in
// memory, OTLP/HTTP in, the UI and query API out.
package devjaeger

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/marketplace/checkout/deploy"
	"github.com/marketplace/checkout/internal/dev/childproc"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// Options describe the Jaeger to run.
type Options struct {
	// Bin is the jaeger binary (bin/jaeger); a relative path is looked up from the working
	// directory upwards (tests run in package folders).
	Bin string
	// Dir holds the configuration file.
	Dir string
	// UIPort serves the UI and the query API (/api/traces); OTLPPort receives OTLP/HTTP. 0 picks
	// a free port.
	UIPort, OTLPPort int
	// Log receives Jaeger's output; nil keeps it to quote should Jaeger exit while starting.
	Log io.Writer
}

// Server is a running Jaeger; it also stops when this process dies.
type Server struct {
	// URL is the UI's and query API's; TracesEndpoint the OTLP/HTTP traces endpoint.
	URL, TracesEndpoint string
	proc                *childproc.Process
}

// FindBinary resolves the jaeger binary: path, else bin/jaeger from the working directory up.
func FindBinary(path string) (string, error) {
	if path == "" {
		path = "bin/jaeger"
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
	return "", fmt.Errorf("jaeger not found at %s: run `make tools` (builds the pinned v1.76.0 from tools/jaeger)", path)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start writes the configuration, launches Jaeger and waits until its query API answers.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := FindBinary(o.Bin)
	if err != nil {
		return nil, err
	}
	ports := []*int{&o.UIPort, &o.OTLPPort}
	for _, p := range ports {
		if *p == 0 {
			if *p, err = pgserver.FreePort(); err != nil {
				return nil, err
			}
		}
	}
	grpcPort, err := pgserver.FreePort()
	if err != nil {
		return nil, err
	}
	conf, err := deploy.Files.ReadFile(deploy.Jaeger)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, deploy.Jaeger)
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		return nil, err
	}
	page, err := deploy.Files.ReadFile(deploy.JaegerUI)
	if err != nil {
		return nil, err
	}
	ui := filepath.Join(o.Dir, filepath.Dir(deploy.JaegerUI))
	if err := os.MkdirAll(ui, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, deploy.JaegerUI), page, 0o644); err != nil {
		return nil, err
	}
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	cmd := exec.Command(bin, "--config", "file:"+path)
	cmd.Env = append(os.Environ(), "JAEGER_QUERY_ADDR="+addr(o.UIPort), "JAEGER_QUERY_GRPC_ADDR="+addr(grpcPort),
		"JAEGER_OTLP_ADDR="+addr(o.OTLPPort), "JAEGER_UI_ASSETS="+ui)
	proc, err := childproc.Start("jaeger", cmd, o.Log)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr(o.UIPort), TracesEndpoint: "http://" + addr(o.OTLPPort) + "/v1/traces", proc: proc}
	if err := proc.WaitReady(ctx, time.Minute, s.ready); err != nil {
		proc.Stop()
		return nil, err
	}
	return s, nil
}

// ready: the query API answers, and the OTLP receiver listens.
func (s *Server) ready(ctx context.Context) error {
	for _, u := range []string{s.URL + "/api/services", s.TracesEndpoint} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}

// Stop ends Jaeger (its traces, kept in memory, with it).
func (s *Server) Stop() {
	if s != nil {
		s.proc.Stop()
	}
}
