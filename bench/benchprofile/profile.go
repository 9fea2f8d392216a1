package main

import (
	"bufio"
	"io"
	"slices"
	"strconv"
	"strings"
)

// sample is one stack perf took: the process it was in and its frames, leaf first.
type sample struct {
	comm   string
	pid    int
	frames []string
}

// parseScript reads `perf script -F comm,pid,ip,sym` output: a header line per sample
// ("comm pid"), then one line per frame ("\taddress symbol"), then a blank line.
func parseScript(r io.Reader, visit func(sample)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *sample
	flush := func() {
		if cur != nil {
			visit(*cur)
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] == '\t' || line[0] == ' ' {
			if cur == nil {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 2 {
				cur.frames = append(cur.frames, "[unknown]")
				continue
			}
			// "addr sym+0xoff" or "addr sym"; perf prints "[unknown]" where it has no symbol.
			sym, dso := strings.Join(f[1:], " "), ""
			if i := strings.LastIndex(sym, " ("); i > 0 {
				sym, dso = sym[:i], sym[i+2:]
			}
			if i := strings.LastIndex(sym, "+0x"); i > 0 {
				sym = sym[:i]
			}
			if strings.HasPrefix(dso, "[kernel") {
				sym = kernelMark + sym
			}
			cur.frames = append(cur.frames, sym)
			continue
		}
		flush()
		// The command may hold spaces; the pid is the last field.
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSuffix(f[len(f)-1], ":"))
		if err != nil {
			continue
		}
		cur = &sample{comm: strings.Join(f[:len(f)-1], " "), pid: pid}
	}
	flush()
	return sc.Err()
}

// group names what a frame belongs to: a sample counts once for each group any of its frames is
// in (inclusive, as pprof's cum), so groups overlap and do not sum to the whole.
type group struct {
	name     string
	prefixes []string
}

func (g group) matches(frame string) bool {
	for _, p := range g.prefixes {
		if strings.HasPrefix(frame, p) {
			return true
		}
	}
	return false
}

// goEntry is the outermost frame of a Go stack below runtime.goexit and runtime.main.
func goEntry(frames []string) string {
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		switch {
		case isKernel(f), f == "runtime.goexit", f == "runtime.goexit.abi0", f == "runtime.main", f == "[unknown]",
			f == "runtime.mstart", f == "runtime.mstart0", f == "runtime.mstart1", f == "runtime.mstart.abi0",
			f == "runtime.rt0_go.abi0", f == "runtime.systemstack.abi0", f == "runtime.systemstack",
			f == "runtime.mcall", f == "runtime.morestack.abi0", f == "runtime.morestack":
			continue
		}
		return f
	}
	return "[unknown]"
}

// tally counts one process's samples: in all, by group (inclusive), by entry and by function
// (inclusive, each function once per sample).
type tally struct {
	total   int
	kernel  int
	groups  map[string]int
	entries map[string]int
	funcs   map[string]int
	leaves  map[string]int
	// inner counts, for each prefix, the innermost frame with that prefix: which call of that code
	// the sample was under.
	inner map[string]map[string]int
}

func newTally() *tally {
	return &tally{groups: map[string]int{}, entries: map[string]int{}, funcs: map[string]int{}, leaves: map[string]int{},
		inner: map[string]map[string]int{}}
}

// kernelMark begins the name of a frame in the kernel.
const kernelMark = "[k] "

// isKernel is a frame in the kernel (a system call, a page fault, an interrupt).
func isKernel(frame string) bool { return strings.HasPrefix(frame, kernelMark) }

func (t *tally) add(s sample, groups []group, prefix string, inner []string) {
	t.total++
	if len(s.frames) == 0 {
		return
	}
	t.leaves[s.frames[0]]++
	if slices.ContainsFunc(s.frames, isKernel) {
		t.kernel++
	}
	for _, g := range groups {
		if slices.ContainsFunc(s.frames, g.matches) {
			t.groups[g.name]++
		}
	}
	t.entries[goEntry(s.frames)]++
	for _, p := range inner {
		if i := slices.IndexFunc(s.frames, func(f string) bool { return strings.HasPrefix(f, p) }); i >= 0 {
			if t.inner[p] == nil {
				t.inner[p] = map[string]int{}
			}
			t.inner[p][strings.TrimSuffix(s.frames[i], "-fm")]++
		}
	}
	if prefix == "" {
		return
	}
	seen := map[string]bool{}
	for _, f := range s.frames {
		if (prefix == anyFunction && !isKernel(f) && f != "[unknown]" || strings.HasPrefix(f, prefix)) && !seen[f] {
			seen[f] = true
			t.funcs[f]++
		}
	}
}

// anyFunction lists every function of a process one by one.
const anyFunction = "*"

// top is the n largest counts of m, largest first, ties by name.
func top(m map[string]int, n int) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(a, b kv) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.k, b.k)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

type kv struct {
	k string
	n int
}
