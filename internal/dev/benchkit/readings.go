package benchkit

import "time"

// Reading is the parts' CPU counters and the machine's at one instant, in UserHZ: Self is the
// reading tool's own (with the helper processes it started, such as perf).
type Reading struct {
	At          time.Time
	Parts       map[string]float64
	Busy, Total float64
	Self        float64
}

// Read reads the parts' counters and the machine's; helpers are processes of the tool (perf)
// whose CPU counts as the tool's.
func Read(parts []Part, helpers ...int) (Reading, error) {
	r := Reading{At: time.Now(), Parts: PartJiffies(parts), Self: SelfJiffies()}
	for _, pid := range helpers {
		if st, err := ProcTimes(pid); err == nil {
			r.Self += st.UTime + st.STime
		}
	}
	var err error
	r.Busy, r.Total, err = MachineJiffies()
	return r, err
}

// Rates is each part's CPU from a to b in jiffies a second (percent of one CPU): an idle stack's
// rate, to take off what a batch measures.
func Rates(a, b Reading) map[string]float64 {
	out := map[string]float64{}
	for name, j := range b.Parts {
		out[name] = (j - a.Parts[name]) / b.At.Sub(a.At).Seconds()
	}
	return out
}

// PerOrder is the CPU, in milliseconds by part, that n orders took from a to b once the idle rate
// (jiffies a second, by part) is taken off.
func PerOrder(a, b Reading, idle map[string]float64, n int) map[string]float64 {
	secs := b.At.Sub(a.At).Seconds()
	out := map[string]float64{}
	for name, j := range b.Parts {
		out[name] = (j - a.Parts[name] - idle[name]*secs) / UserHZ * 1000 / float64(n)
	}
	return out
}

// OtherShare is the share of the machine's CPU from a to b that went neither to the parts nor to
// the tool: above a tenth, what was measured meanwhile was disturbed.
func OtherShare(a, b Reading) float64 {
	total := b.Total - a.Total
	if total <= 0 {
		return 0
	}
	ours := b.Self - a.Self
	for name, j := range b.Parts {
		ours += j - a.Parts[name]
	}
	return max((b.Busy-a.Busy)-ours, 0) / total
}
