// Package benchkit holds what the benchmark tools of the bench module and make chaos share: the dev stack (or
// `make cluster`'s shape) on ports of its own, the Temporal floor (an empty workflow started as an order is), readings of
// /proc, a figure's median and range over runs, and the writing of a marked section of docs/benchmarks.md.
package benchkit

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// UserHZ is the unit of /proc's CPU times: fixed at 100 a second on Linux.
const UserHZ = 100

// ProcStat is what the tools read of /proc/<pid>/stat: the command, the parent, and the CPU times
// (in UserHZ) of the process and of its reaped children.
type ProcStat struct {
	Comm                         string
	PPID                         int
	UTime, STime, CUTime, CSTime float64
}

// ProcTimes reads /proc/<pid>/stat.
func ProcTimes(pid int) (ProcStat, error) {
	var p ProcStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// The command name may hold spaces; the fields after it start with the state (field 3).
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return p, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	p.Comm = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return p, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	p.PPID, _ = strconv.Atoi(f[1])
	for k, dst := range []*float64{&p.UTime, &p.STime, &p.CUTime, &p.CSTime} {
		*dst, _ = strconv.ParseFloat(f[11+k], 64)
	}
	return p, nil
}

// PIDs lists the processes of the machine.
func PIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// PostmasterPID reads the postmaster's pid from a cluster's data folder.
func PostmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// OnlineCPUs counts the CPUs /proc/stat reports.
func OnlineCPUs() int {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return max(n, 1)
}

// LoadAverage is the 1-minute load average, as /proc/loadavg says (NaN when unreadable).
func LoadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return math.NaN()
}

// CPUModel is the machine's CPU model name.
func CPUModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "model name") {
			if _, v, ok := strings.Cut(line, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}

// WriteSection replaces the section of path between the start and end markers (markers
// included) by section, or appends section when the markers are not there, keeping everything
// else.
func WriteSection(path, startMarker, endMarker, section string) error {
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		old = []byte("# Benchmarks\n\nEvery figure here is measured on the machine named beside it, with a " +
			"baseline measured beside it on the same machine in the same run, so that the figure is " +
			"judged against that baseline rather than against numbers from elsewhere.\n")
	case err != nil:
		return err
	}
	text := string(old)
	start, end := strings.Index(text, startMarker), strings.Index(text, endMarker)
	switch {
	case start >= 0 && end > start:
		text = text[:start] + strings.TrimSuffix(section, "\n") + text[end+len(endMarker):]
	case start >= 0 || end >= 0:
		return fmt.Errorf("%s: unbalanced %s / %s markers", path, startMarker, endMarker)
	default:
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

// ChdirModuleRoot makes the module root the working directory: the tools run from there, where
// `make build` leaves bin/.
func ChdirModuleRoot() error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	return os.Chdir(root)
}

// ModuleRoot is the folder of go.mod above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory: run from the module")
		}
		dir = parent
	}
}

// MachineJiffies reads the machine's CPU counters from /proc/stat, in UserHZ: busy (time stolen
// by the hypervisor counts as busy) and total.
func MachineJiffies() (busy, total float64, err error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("unreadable /proc/stat line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest time is already in user.
	for i, v := range f[1:9] {
		n, _ := strconv.ParseFloat(v, 64)
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

// TreeJiffies is the CPU time, in UserHZ, of pid with its reaped children and its live children:
// a PostgreSQL postmaster with its backends, WAL writer and the rest.
func TreeJiffies(pid int) (float64, error) {
	st, err := ProcTimes(pid)
	if err != nil {
		return 0, err
	}
	total := st.UTime + st.STime + st.CUTime + st.CSTime
	for _, child := range PIDs() {
		if c, err := ProcTimes(child); err == nil && c.PPID == pid {
			total += c.UTime + c.STime
		}
	}
	return total, nil
}

// SelfJiffies is the CPU time of this process, in UserHZ.
func SelfJiffies() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9 * UserHZ
}

// QuantileMs is the p-quantile (0 to 1) of latencies sorted in increasing order, in milliseconds
// (0 when there are none).
func QuantileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds()) / 1000
}
