package benchkit

import (
	"fmt"
	"path/filepath"
)

// Part is one server process of a stack whose CPU a benchmark reads: with Tree, the process with
// its children (a PostgreSQL postmaster with its backends), else the process alone.
type Part struct {
	Name string
	PID  int
	Tree bool
}

// DevParts finds the server processes of `checkout-dev dev` running as pid on data folder dir:
// the checkout process itself (API, worker, outbox relay), the Temporal dev server and the event
// broker it started, and its PostgreSQL cluster. A tool's own process (the load generator) is none
// of them.
func DevParts(pid int, dir string) ([]Part, error) {
	parts := []Part{{Name: "checkout", PID: pid}}
	pm, err := PostmasterPID(filepath.Join(dir, "pg"))
	if err != nil {
		return nil, fmt.Errorf("postmaster.pid: %w", err)
	}
	parts = append(parts, Part{Name: "postgres", PID: pm, Tree: true})
	found := map[string]bool{}
	for _, child := range PIDs() {
		st, err := ProcTimes(child)
		if err != nil || st.PPID != pid || child == pm {
			continue
		}
		switch st.Comm {
		case "temporal", "nats-server":
			parts = append(parts, Part{Name: st.Comm, PID: child, Tree: true})
			found[st.Comm] = true
		}
	}
	if !found["temporal"] {
		return nil, fmt.Errorf("no temporal process under `checkout-dev dev` (pid %d)", pid)
	}
	return parts, nil
}

// PartJiffies reads each part's CPU time so far, in UserHZ, by name.
func PartJiffies(parts []Part) map[string]float64 {
	out := make(map[string]float64, len(parts))
	for _, p := range parts {
		if p.Tree {
			if j, err := TreeJiffies(p.PID); err == nil {
				out[p.Name] += j
			}
			continue
		}
		if st, err := ProcTimes(p.PID); err == nil {
			out[p.Name] += st.UTime + st.STime
		}
	}
	return out
}
