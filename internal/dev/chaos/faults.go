package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/workflows"
)

// The faults, by the names -faults takes, in the order a full run injects them.
const (
	FaultWorker   = "worker"
	FaultAPI      = "api"
	FaultHistory  = "history"
	FaultMatching = "matching"
	FaultFrontend = "frontend"
	FaultPostgres = "postgres"
	FaultBroker   = "broker"
)

// AllFaults is every fault, in the order `make chaos` injects them.
var AllFaults = []string{FaultWorker, FaultAPI, FaultHistory, FaultMatching, FaultFrontend, FaultPostgres, FaultBroker}

// fault is one thing done to the cluster: inject does it (and, for the frontend, undoes it), back
// answers nil once the cluster has put right what it did.
type fault struct {
	name, what string
	inject     func(ctx context.Context) error
	back       func(ctx context.Context) error
}

// faultOf builds the named fault against d's cluster.
func (d *driver) faultOf(name string) (fault, error) {
	pt := d.stack.Ports
	loop := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	switch name {
	case FaultWorker:
		// The last worker of the build the cluster runs: the first is the one that registered the
		// schedules, any would do.
		proc := cluster.WorkerName(workflows.BuildID, d.opts.Workers)
		return d.killed(name, proc, "the supervisor starts it again", func(ctx context.Context) error {
			addr, err := d.listens(proc)
			if err != nil {
				return err
			}
			return cluster.HTTPOK("http://" + addr + "/metrics")(ctx)
		}), nil
	case FaultAPI:
		return d.killed(name, "api-1", "the supervisor starts it again; HAProxy takes it out, then back",
			func(ctx context.Context) error { return d.replicaUp(ctx, "api-1") }), nil
	case FaultHistory:
		return d.killed(name, "temporal-history", "the supervisor starts it again", cluster.Listening(loop(pt.History))), nil
	case FaultMatching:
		return d.killed(name, "temporal-matching", "the supervisor starts it again", cluster.Listening(loop(pt.Matching))), nil
	case FaultFrontend:
		return fault{name: name,
			what: fmt.Sprintf("SIGSTOP temporal-frontend for %s, then SIGCONT (the process is frozen, its connections stay open)",
				d.opts.FrontendStop),
			inject: func(ctx context.Context) error {
				pid, err := d.pid("temporal-frontend")
				if err != nil {
					return err
				}
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					return fmt.Errorf("SIGSTOP temporal-frontend: %w", err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(d.opts.FrontendStop):
				}
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					return fmt.Errorf("SIGCONT temporal-frontend: %w", err)
				}
				return ctx.Err()
			},
			back: func(ctx context.Context) error {
				_, err := d.temporal.CheckHealth(ctx, nil)
				return err
			}}, nil
	case FaultPostgres:
		restarts := 0
		return fault{name: name,
			what: "pg_ctl stop -m immediate on the cluster's PostgreSQL (the product's and Temporal's databases); the cluster starts it again",
			inject: func(ctx context.Context) error {
				restarts = strings.Count(d.output(), "postgres started again")
				return pgserver.StopImmediate(ctx, filepath.Join(d.stack.Dir, "pg"))
			},
			back: func(ctx context.Context) error {
				if strings.Count(d.output(), "postgres started again") <= restarts {
					return errors.New("not started again yet")
				}
				conn, err := pgx.Connect(ctx, d.stack.DatabaseURL)
				if err != nil {
					return err
				}
				return conn.Close(ctx)
			}}, nil
	case FaultBroker:
		var old []int
		return fault{name: name,
			what: fmt.Sprintf("kill -9 every node of the event broker (nats-1…nats-%d) at once; the supervisor starts them again, their JetStream stores kept",
				cluster.NATSNodes),
			inject: func(context.Context) error {
				old = old[:0]
				for i := range cluster.NATSNodes {
					proc := fmt.Sprintf("nats-%d", i+1)
					pid, err := d.pid(proc)
					if err != nil {
						return err
					}
					old = append(old, pid)
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						return fmt.Errorf("kill -9 %s (pid %d): %w", proc, pid, err)
					}
				}
				return nil
			},
			back: func(ctx context.Context) error {
				for i := range cluster.NATSNodes {
					proc := fmt.Sprintf("nats-%d", i+1)
					if pid, err := d.pid(proc); err != nil || pid == old[i] {
						return fmt.Errorf("%s not started again yet", proc)
					}
					// Whole health: the node's JetStream has its cluster's leader and is current.
					if err := cluster.HTTPOK("http://" + loop(pt.NATSMonitor+i) + "/healthz")(ctx); err != nil {
						return err
					}
				}
				return nil
			}}, nil
	}
	return fault{}, fmt.Errorf("no fault %q (one of %s)", name, strings.Join(AllFaults, ", "))
}

// killed is kill -9 of the cluster's process proc: back once the supervisor runs it again (another
// pid) and ready says it serves.
func (d *driver) killed(name, proc, after string, ready func(context.Context) error) fault {
	var old int
	return fault{name: name, what: "kill -9 " + proc + "; " + after,
		inject: func(context.Context) error {
			pid, err := d.pid(proc)
			if err != nil {
				return err
			}
			old = pid
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return fmt.Errorf("kill -9 %s (pid %d): %w", proc, pid, err)
			}
			return nil
		},
		back: func(ctx context.Context) error {
			pid, err := d.pid(proc)
			if err != nil {
				return err
			}
			if pid == old {
				return fmt.Errorf("%s not started again yet", proc)
			}
			return ready(ctx)
		}}
}

// listens is the first address the cluster's process name listens on, as its processes.json says.
func (d *driver) listens(name string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(d.stack.Dir, "processes.json"))
	if err != nil {
		return "", err
	}
	var state map[string]struct{ Listens []string }
	if err := json.Unmarshal(raw, &state); err != nil {
		return "", err
	}
	if len(state[name].Listens) == 0 {
		return "", fmt.Errorf("the cluster runs no %s", name)
	}
	return state[name].Listens[0], nil
}

// pid is the cluster's process name's pid, as its processes.json says.
func (d *driver) pid(name string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(d.stack.Dir, "processes.json"))
	if err != nil {
		return 0, err
	}
	var state map[string]struct{ Pid int }
	if err := json.Unmarshal(raw, &state); err != nil {
		return 0, err
	}
	if state[name].Pid == 0 {
		return 0, fmt.Errorf("the cluster runs no %s", name)
	}
	return state[name].Pid, nil
}

func (d *driver) output() string {
	raw, _ := os.ReadFile(d.stack.Output)
	return string(raw)
}

// replicaUp is nil once HAProxy's stats page shows the replica UP.
func (d *driver) replicaUp(ctx context.Context, name string) error {
	status, err := cluster.ReplicaStatus(ctx, "127.0.0.1:"+strconv.Itoa(d.stack.Ports.Stats), name)
	if err == nil && status != "UP" {
		err = fmt.Errorf("%s is %s", name, status)
	}
	return err
}
