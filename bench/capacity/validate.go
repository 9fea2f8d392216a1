package main

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/marketplace/checkout/bench/internal/figures"
)

// clusterShards is the history shards of `make cluster`'s Temporal (a new folder's default,
// internal/dev/cluster.DefaultHistoryShards), which the cluster runs used.
const clusterShards = 16

// The simulated time of a validation run: long enough for several turns of 200 shoppers' loop
// (about 20 s each when the machine is saturated).
const (
	validateWarmup  = 60.0
	validateMeasure = 240.0
)

// validationSeeds is how many simulations, each with a seed of its own, a prediction of the
// validation is the median of: at 200 shoppers on this machine one simulation's p99 ranged from
// 36 % to 105 % above the run's with the seed alone, so a single one says little.
const validationSeeds = 5

// Prediction is the model's prediction of one run: each figure the median over the simulations
// (one per seed), each simulation's kept for its spread.
type Prediction struct {
	Result
	Runs []Result
}

// predict simulates shoppers through t at costs c once for each of validationSeeds seeds from
// seed on, the simulations side by side.
func predict(c Costs, t Topology, shoppers int, seed uint64) Prediction {
	runs := make([]Result, validationSeeds)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { runs[i] = Simulate(c, t, shoppers, validateWarmup, validateMeasure, seed+uint64(i)) })
	}
	wg.Wait()
	m := Result{Shoppers: shoppers, Seconds: validateMeasure, PoolBusy: map[string]float64{}}
	for _, f := range []func(*Result) *float64{
		func(r *Result) *float64 { return &r.PlacedPerSec }, func(r *Result) *float64 { return &r.CreatedPerSec },
		func(r *Result) *float64 { return &r.P50 }, func(r *Result) *float64 { return &r.P99 },
		func(r *Result) *float64 { return &r.Mean }, func(r *Result) *float64 { return &r.ShardBusy },
		func(r *Result) *float64 { return &r.ShardMean }, func(r *Result) *float64 { return &r.ShardHold },
		func(r *Result) *float64 { return &r.NotifyBusy }, func(r *Result) *float64 { return &r.InFlight },
	} {
		*f(&m) = medianOf(runs, func(r Result) float64 { return *f(&r) })
	}
	for name := range runs[0].PoolBusy {
		m.PoolBusy[name] = medianOf(runs, func(r Result) float64 { return r.PoolBusy[name] })
	}
	return Prediction{Result: m, Runs: runs}
}

// span is the lowest and highest of one figure over the prediction's simulations.
func (p Prediction) span(figure func(Result) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range p.Runs {
		lo, hi = math.Min(lo, figure(r)), math.Max(hi, figure(r))
	}
	return lo, hi
}

func medianOf(runs []Result, figure func(Result) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = figure(r)
	}
	return quantile(xs, 0.5)
}

// Check is one measured campaign run beside the model's prediction of it.
type Check struct {
	Shoppers    int
	Measured    figures.Run
	Predicted   Prediction
	Calibration bool // the run the costs came from
	// Processes is the prediction with the cores shared among processes (the kernel's threads,
	// Go's goroutines) rather than among requests: the sensitivity to that choice.
	Processes Prediction
	// WriteMs is the run's measured mean latency of its execution writes.
	WriteMs float64
}

// Validation is the model against the cluster's campaign runs on this machine.
type Validation struct {
	Checks []Check
	// WriteMs is the measured mean latency of the execution writes in the calibration run (the
	// time a write holds its shard), beside the model's; FloorWriteMs the floor's at the same count,
	// on a machine that was not saturated.
	WriteMs, FloorWriteMs float64
	// HotRowWaits is the most backends the saga's runs had waiting on the stock rows' locks.
	HotRowWaits float64
	// Reverse is the model calibrated from the other load point instead, predicting this one.
	Reverse     []Check
	ReverseFrom int
}

// writeMs is the mean latency of the run's execution writes (Create/UpdateWorkflowExecution).
func writeMs(r figures.Run) float64 {
	var n, sum float64
	if p := r.Window.Persistence; p != nil {
		for _, op := range p.TopOps {
			if op.Op == "history CreateWorkflowExecution" || op.Op == "history UpdateWorkflowExecution" {
				n += op.PerSecond
				sum += op.PerSecond * op.MeanMs
			}
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// inFlight is the run's persistence calls under way on average (their latency over the window).
func inFlight(r figures.Run) float64 {
	if p := r.Window.Persistence; p != nil {
		return p.InFlight
	}
	return 0
}

// machine is this machine as the cluster runs had it: every part on one host of cpus cores. With
// processes, the cores are shared among the processes the cluster ran (two API replicas and two
// workers, Temporal's four services, HAProxy and the broker, the load generator, and a PostgreSQL
// backend per statement); without, among requests.
func machine(cpus, shardIO int, processes bool) Topology {
	t := Topology{Pools: map[string]Pool{"machine": {Hosts: 1, Cores: float64(cpus)}}, Place: map[string]string{},
		Shards: clusterShards, ShardIO: shardIO}
	if processes {
		t.Procs = map[string]int{partAPI: 4, partTemporal: 4, partFront: 2, partDriver: 1}
	}
	for _, p := range parts {
		t.Place[p] = "machine"
	}
	return t
}

func validate(in Inputs, cluster figures.Results, calibrateAt int, seed uint64) (Validation, error) {
	var v Validation
	for _, r := range cluster.Runs {
		if r.What != "campaign" {
			continue
		}
		p := predict(in.Costs, machine(in.CPUs, in.ShardIO, false), r.Shoppers, seed)
		q := predict(in.Costs, machine(in.CPUs, in.ShardIO, true), r.Shoppers, seed)
		v.Checks = append(v.Checks, Check{Shoppers: r.Shoppers, Measured: r, Predicted: p, Processes: q,
			Calibration: r.Shoppers == calibrateAt, WriteMs: writeMs(r)})
		if r.Shoppers == calibrateAt {
			v.WriteMs = writeMs(r)
		}
	}
	if f, err := find(cluster, "floor", calibrateAt); err == nil {
		v.FloorWriteMs = writeMs(f)
	}
	v.HotRowWaits = hotRowWaits(cluster)
	if len(v.Checks) < 2 {
		return v, fmt.Errorf("cluster: %d campaign runs, the validation needs two load points", len(v.Checks))
	}
	slices.SortFunc(v.Checks, func(a, b Check) int { return a.Shoppers - b.Shoppers })
	return v, nil
}

// reverse calibrates from every other campaign run in turn and predicts the calibration count's
// run from it: the same check the other way round.
func reverse(v *Validation, cluster figures.Results, campaign figures.Results, lockWaits figures.LockWaitResults, calibrateAt int, seed uint64) error {
	target, err := find(cluster, "campaign", calibrateAt)
	if err != nil {
		return err
	}
	for _, k := range v.Checks {
		if k.Calibration {
			continue
		}
		in, err := calibrate(cluster, campaign, lockWaits, k.Shoppers)
		if err != nil {
			return err
		}
		for _, r := range []figures.Run{k.Measured, target} {
			p := predict(in.Costs, machine(in.CPUs, in.ShardIO, false), r.Shoppers, seed)
			v.Reverse = append(v.Reverse, Check{Shoppers: r.Shoppers, Measured: r, Predicted: p, Calibration: r.Shoppers == k.Shoppers})
		}
		v.ReverseFrom = k.Shoppers
		break
	}
	return nil
}
