package benchsuite

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// What else kept the machine busy while a command ran: the CPU time every
// process spent (from /proc/stat) less the command's own (from its
// rusage), over the run's wall time, in cores. On a 2-core machine a
// figure well below 1 says the second core was mostly free for the
// command; near or above 1, a 2-worker row cannot show scaling.

// clockTick is USER_HZ, the unit of /proc/stat: 100 on every Linux that
// runs Go.
const clockTick = 100

// cpuBusy is the CPU time all processes have spent so far (user, nice,
// system, irq, softirq, steal), or -1 when /proc/stat cannot be read.
func cpuBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return -1
	}
	return parseCPUBusy(sc.Text())
}

// parseCPUBusy reads the "cpu" line of /proc/stat.
func parseCPUBusy(line string) time.Duration {
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait, and guest time (already in user)
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick
}

// othersMeter sums, over a measurement's runs, the CPU time other
// processes spent and the wall time the runs took.
type othersMeter struct {
	others, wall time.Duration
	unknown      bool
	start        time.Duration
}

func (m *othersMeter) begin() { m.start = cpuBusy() }

// end adds a run, given the command's own CPU time.
func (m *othersMeter) end(run Run) { m.add(m.start, cpuBusy(), run) }

// add counts a run during which the machine's busy time went from start
// to now.
func (m *othersMeter) add(start, now time.Duration, run Run) {
	if start < 0 || now < 0 {
		m.unknown = true
		return
	}
	m.others += max(0, now-start-run.User-run.Sys)
	m.wall += run.Wall
}

// cores is the other processes' mean use in cores, or -1 when unknown. It
// is counted in ticks of 10 ms, so over runs of a fraction of a second it
// swings: it is held to the number of CPUs.
func (m *othersMeter) cores() float64 {
	if m.unknown || m.wall <= 0 {
		return -1
	}
	return min(m.others.Seconds()/m.wall.Seconds(), float64(runtime.NumCPU()))
}

// othersCell shows the 1-minute load at the start and the cores others
// kept busy during the runs.
func othersCell(r *Result) string {
	v, ok := r.Metric("others_cores")
	if !ok || v < 0 {
		return loadCell(r.Load1)
	}
	return loadCell(r.Load1) + "; others " + strconv.FormatFloat(v, 'f', 1, 64)
}
