// Package devprometheus runs the distribution's Prometheus as a child process of `dev`, on
// loopback, scraping the local stack's /metrics with the product's rules
// (deploy/prometheus/rules.yml), its data in a folder of the project. A deployment runs its own
// Prometheus with the same rules (deploy/docker-compose.yml).
package devprometheus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/marketplace/checkout/internal/pgserver"
)

// RulesFile is the product's rules, relative to the repository, where `make run` starts dev.
const RulesFile = "deploy/prometheus/rules.yml"

// Options describe the Prometheus to run.
type Options struct {
	// Binary is the prometheus executable; empty finds it on PATH.
	Binary string
	// Dir holds the generated configuration and the time series (Dir/data).
	Dir string
	// Port serves the web UI and HTTP API on 127.0.0.1; 0 picks a free one.
	Port int
	// Targets are the scrape jobs: job name → host:port of each /metrics.
	Targets map[string][]string
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
	cmd  *exec.Cmd
	done chan error
}

// FindBinary resolves the prometheus executable: the given path, else PATH.
func FindBinary(path string) (string, error) {
	if path == "" {
		path = "prometheus"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%s not found: install your distribution's prometheus package (make prometheus-binaries)", path)
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
	StaticConfigs []staticConfig `yaml:"static_configs"`
}

type staticConfig struct {
	Targets []string `yaml:"targets"`
}

// WriteConfig writes the configuration file for o into o.Dir and returns its path. Rule files are
// made absolute, so that the file does not depend on the directory Prometheus starts in.
func WriteConfig(o Options) (string, error) {
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
	out, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(o.Dir, "prometheus.yml")
	return path, os.WriteFile(path, append([]byte("# Written by `checkout dev` at each start.\n"), out...), 0o644)
}

// Start writes the configuration, launches Prometheus and waits until it is ready.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := FindBinary(o.Binary)
	if err != nil {
		return nil, err
	}
	cfg, err := WriteConfig(o)
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
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(o.Dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=7d", "--log.format=json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	var buf bytes.Buffer
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	} else {
		cmd.Stdout, cmd.Stderr = &buf, &buf
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{URL: "http://" + addr, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	if err := s.waitReady(ctx, &buf); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context, log *bytes.Buffer) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("prometheus exited while starting: %v\n%s", err, log.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(s.URL + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errors.New("prometheus not ready after 60s"), lastErr)
}

// Stop ends Prometheus and waits for it.
func (s *Server) Stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}
