package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var labelRe = regexp.MustCompile(`(\w+)="([^"]*)"`)

// ScrapeMetrics reads a Prometheus text endpoint (the Temporal dev server's /metrics) and calls
// visit with each sample: its metric name, labels and value.
func ScrapeMetrics(ctx context.Context, url string, visit func(name string, labels map[string]string, value float64)) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var sample, value string
		if i := strings.LastIndex(line, "} "); i >= 0 { // label values may hold spaces
			sample, value = line[:i+1], line[i+2:]
		} else if n, v, ok := strings.Cut(line, " "); ok {
			sample, value = n, v
		} else {
			continue
		}
		name, labels, _ := strings.Cut(strings.TrimSuffix(sample, "}"), "{")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, m := range labelRe.FindAllStringSubmatch(labels, -1) {
			l[m[1]] = m[2]
		}
		visit(name, l, v)
	}
	return sc.Err()
}
