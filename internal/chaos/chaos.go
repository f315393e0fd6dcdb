// Package chaos is what tokenmill's chaos and bad-input tests share: kill
// moments drawn from a seed, a way to SIGKILL a real binary at one of
// them, the malformed inputs every tool is tried on, and the report the
// long runs leave for RELIABILITY.md (pipelines/chaos.sh). Tests only; its
// own tests drive every record tool (extract, dedup, shard, merge, stats)
// through the same hostile paths: pipes and FIFOs, aliased outputs, planted
// links, locks, kills, full disks.
package chaos

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// Environment of a chaos run.
const (
	// LongEnv set to "long" makes the chaos tests run at full size, as
	// pipelines/chaos.sh runs them for RELIABILITY.md's figures. It sizes
	// the chaos tests alone; the long test tier is testbin.LongEnv's.
	LongEnv = "TOKENMILL_CHAOS"
	// ReportEnv names a directory where each chaos test leaves its
	// figures as a Markdown section (<tool>.md).
	ReportEnv = "TOKENMILL_CHAOS_REPORT"
)

// Long reports whether this is the full-size run.
func Long() bool { return os.Getenv(LongEnv) == "long" }

// RunName is "short" in the default test tier, "long-tier" in the long
// one, "long" at full size.
func RunName() string { return Size("short", "long-tier", "long") }

// Size is small in a plain test run, long in the long test tier
// (testbin.LongEnv) and full in the full-size run (LongEnv).
func Size[T any](small, long, full T) T {
	switch {
	case Long():
		return full
	case testbin.IsLong():
		return long
	}
	return small
}

// Report writes a chaos test's figures (Markdown) where chaos.sh collects
// them, when it asked for them.
func Report(t testing.TB, tool, markdown string) {
	t.Helper()
	dir := os.Getenv(ReportEnv)
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, tool+".md"), []byte(markdown), 0o644); err != nil {
		t.Error(err)
	}
}

// Table renders counts as a two-column Markdown table, rows sorted.
func Table(what, counted string, counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | %s |\n|---|---|\n", what, counted)
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %d |\n", k, counts[k])
	}
	return b.String()
}

// Reproduce is the report's closing line: the command that runs test in
// pkg at this run's size.
func Reproduce(test, pkg string) string {
	env := Size("", testbin.LongEnv+"=1 ", LongEnv+"=long ")
	return fmt.Sprintf("Reproduce: `%sgo test -count=1 -run %s -v ./%s/`\n", env, test, pkg)
}

// Moment is when a run is killed: After a delay from its start, or, when
// Glob is set, once a file matching it has grown to Size bytes (an atomic
// writer's temporary file: the kill then lands mid-write).
type Moment struct {
	After time.Duration
	Glob  string
	Size  int64
}

func (m Moment) String() string {
	if m.Glob != "" {
		return fmt.Sprintf("once %s holds %d bytes", filepath.Base(m.Glob), m.Size)
	}
	return fmt.Sprintf("after %v", m.After)
}

// Moments draws n kill moments from seed, alternating: a delay up to span
// (how long an uninterrupted run takes), then a size up to size of the
// file matching glob (what the run writes in the end).
func Moments(seed uint64, n int, span time.Duration, glob string, size int64) []Moment {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	out := make([]Moment, n)
	for i := range out {
		if i%2 == 0 || glob == "" {
			out[i] = Moment{After: time.Duration(rng.Int64N(int64(span) + 1))}
		} else {
			out[i] = Moment{Glob: glob, Size: 1 + rng.Int64N(max(size, 1))}
		}
	}
	return out
}

// Kill runs the built binary name with args and kills it with SIGKILL at
// m. It reports whether the kill landed before the run ended on its own
// (bounded by testbin.Timeout).
func Kill(t testing.TB, m Moment, name string, args ...string) bool {
	t.Helper()
	return KillFed(t, m, nil, name, args...)
}

// KillFed is Kill for a run that reads stdin from a pipe: stdin is written
// into it as fast as the binary reads, then the pipe is closed.
func KillFed(t testing.TB, m Moment, stdin []byte, name string, args ...string) bool {
	t.Helper()
	p := testbin.Start(t, name, args...)
	go func() {
		p.Stdin.Write(stdin) // fails once the binary is killed: nothing to do
		p.Stdin.Close()
	}()
	deadline := time.NewTimer(testbin.Timeout)
	defer deadline.Stop()
	if m.Glob == "" {
		select {
		case <-p.Done():
		case <-time.After(m.After):
		}
	} else {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for grown := false; !grown; {
			select {
			case <-p.Done():
				grown = true
			case <-deadline.C:
				t.Fatalf("%s: no file %s reached %d bytes within %v", name, m.Glob, m.Size, testbin.Timeout)
			case <-tick.C:
				grown = globSize(m.Glob) >= m.Size
			}
		}
	}
	select {
	case <-p.Done():
		p.Wait(t, time.Second)
		return false
	default:
	}
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)
	return true
}

// globSize is the size of the largest file matching glob.
func globSize(glob string) int64 {
	names, _ := filepath.Glob(glob)
	var n int64
	for _, name := range names {
		if st, err := os.Stat(name); err == nil {
			n = max(n, st.Size())
		}
	}
	return n
}

// Litter removes and counts the files a killed atomic writer leaves in
// dir: its temporary files, named <target>.tmp-<random>.
func Litter(t testing.TB, dir string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	return len(names)
}

// What a killed run left in a file, against the content a whole run writes.
const (
	Absent   = "absent"
	Complete = "complete"
	Short    = "short" // anything but absent or complete
)

// FileIs tells what is at path against want, the complete content.
func FileIs(path string, want []byte) string {
	got, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return Absent
	case err == nil && bytes.Equal(got, want):
		return Complete
	}
	return Short
}
