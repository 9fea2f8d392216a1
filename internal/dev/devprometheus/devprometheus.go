// Package devprometheus runs the distribution's Prometheus as a child process of `dev`, on
// loopback, scraping the local stack's /metrics with the product's rules
// (deploy/prometheus/rules.yml), its data in a folder of the project. A deployment runs its own
// Prometheus with the same rules (deploy/docker-compose.yml).
package devprometheus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/internal/dev/childproc"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// RulesFile is the product's rules, relative to the repository, where `make run` starts dev.
const RulesFile = "deploy/prometheus/rules.yml"

// Options describe the Prometheus to run.
type Options struct {
	// Dir holds the generated configuration and the time series (Dir/data).
	Dir string
	// Port serves the web UI and HTTP API on 127.0.0.1; 0 picks a free one.
	Port int
	// Targets are the scrape jobs: job name → host:port of each /metrics.
	Targets map[string][]string
	// TargetFiles are scrape jobs whose targets a file lists, in Prometheus's file_sd format:
	// job name → the file, read again whenever it changes.
	TargetFiles map[string]string
	// Rules are rule files, evaluated as the targets are scraped.
	Rules []string
	// Interval is the scrape and rule evaluation interval (default 15s).
	Interval time.Duration
	// Log receives the server's output; nil discards it.
	Log io.Writer
}

// Server is a running Prometheus. Stop it; it also stops when this process dies.
type Server struct {
	// URL is where its web UI and HTTP API answer.
	URL  string
	proc *childproc.Process
}

// findBinary finds the distribution's prometheus on PATH.
func findBinary() (string, error) {
	p, err := exec.LookPath("prometheus")
	if err != nil {
		return "", errors.New("prometheus not found on PATH: install your distribution's prometheus package (make prometheus-binaries)")
	}
	return p, nil
}

// config is the part of Prometheus's configuration file that dev writes.
type config struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string       `yaml:"rule_files"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

type scrapeConfig struct {
	JobName       string         `yaml:"job_name"`
	StaticConfigs []staticConfig `yaml:"static_configs,omitempty"`
	FileSDConfigs []fileSDConfig `yaml:"file_sd_configs,omitempty"`
}

type fileSDConfig struct {
	Files []string `yaml:"files"`
	// RefreshInterval rereads the files in case a change was not seen as it happened.
	RefreshInterval string `yaml:"refresh_interval"`
}

type staticConfig struct {
	Targets []string `yaml:"targets"`
}

// writeConfig writes the configuration file for o into o.Dir and returns its path. Rule files are
// made absolute, so that the file does not depend on the directory Prometheus starts in.
func writeConfig(o Options) (string, error) {
	var c config
	interval := o.Interval
	if interval <= 0 {
		interval = 15 * time.Second
	}
	c.Global.ScrapeInterval, c.Global.EvaluationInterval = interval.String(), interval.String()
	for _, r := range o.Rules {
		abs, err := filepath.Abs(r)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("rule file: %w", err)
		}
		c.RuleFiles = append(c.RuleFiles, abs)
	}
	for _, job := range slices.Sorted(maps.Keys(o.Targets)) {
		c.ScrapeConfigs = append(c.ScrapeConfigs, scrapeConfig{JobName: job, StaticConfigs: []staticConfig{{Targets: o.Targets[job]}}})
	}
	for _, job := range slices.Sorted(maps.Keys(o.TargetFiles)) {
		abs, err := filepath.Abs(o.TargetFiles[job])
		if err != nil {
			return "", err
		}
		c.ScrapeConfigs = append(c.ScrapeConfigs, scrapeConfig{JobName: job,
			FileSDConfigs: []fileSDConfig{{Files: []string{abs}, RefreshInterval: interval.String()}}})
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(o.Dir, "prometheus.yml")
	return path, os.WriteFile(path, append([]byte("# Written by `checkout-dev dev` at each start.\n"), out...), 0o644)
}

// Start writes the configuration, launches Prometheus and waits until it is ready.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	cfg, err := writeConfig(o)
	if err != nil {
		return nil, err
	}
	port := o.Port
	if port == 0 {
		if port, err = pgserver.FreePort(); err != nil {
			return nil, err
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	proc, err := childproc.Start("prometheus", exec.Command(bin, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(o.Dir, "data"), "--web.listen-address="+addr,
		"--storage.tsdb.retention.time=7d", "--log.format=json",
		// The latency histograms' exemplars (trace ids), kept to be queried beside the series.
		"--enable-feature=exemplar-storage"), o.Log)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, proc: proc}
	if err := proc.WaitReady(ctx, time.Minute, s.ready); err != nil {
		proc.Stop()
		return nil, err
	}
	return s, nil
}

// ready: Prometheus answers its readiness endpoint.
func (s *Server) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// API reads what Prometheus's HTTP API answers at path (/api/v1/…) into out: the answer's data.
func (s *Server) API(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	var body struct {
		Status string
		Data   json.RawMessage
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: status %q", path, body.Status)
	}
	return json.Unmarshal(body.Data, out)
}

// Value is the value of an instant query that has one series; an error if it has none or more.
func (s *Server) Value(ctx context.Context, query string) (string, error) {
	var data struct {
		Result []struct{ Value [2]any }
	}
	if err := s.API(ctx, "/api/v1/query?query="+url.QueryEscape(query), &data); err != nil {
		return "", err
	}
	if len(data.Result) != 1 {
		return "", fmt.Errorf("%s: %d series", query, len(data.Result))
	}
	v, _ := data.Result[0].Value[1].(string)
	return v, nil
}

// AlertState is the state of the named alert: "" (inactive), pending or firing.
func (s *Server) AlertState(ctx context.Context, name string) (string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string
			State  string
		}
	}
	if err := s.API(ctx, "/api/v1/alerts", &data); err != nil {
		return "", err
	}
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State, nil
		}
	}
	return "", nil
}

// Stop ends Prometheus and waits for it.
func (s *Server) Stop() {
	if s != nil {
		s.proc.Stop()
	}
}
