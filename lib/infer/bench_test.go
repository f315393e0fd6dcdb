package infer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// Benchmarks. Figures on a shared 2-core machine are rough; each reports
// its own metrics with b.ReportMetric.

// benchPrompts is a prompt file of n records in a temporary directory.
func benchPrompts(b *testing.B, n int) string {
	b.Helper()
	path, _ := promptSet{n: n}.write(b, b.TempDir(), "prompts.jsonl")
	return path
}

// BenchmarkClientOverhead: infer against a zero-latency simulator in the
// same process, in requests per second (simulator included).
func BenchmarkClientOverhead(b *testing.B) {
	const n = 20000
	fleet := startFleet(b, llmsim.Config{Instant: true}, 2)
	in := benchPrompts(b, n)
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		out := filepath.Join(b.TempDir(), "gen.jsonl")
		start := time.Now()
		res := runInfer(b, 5*time.Minute, "", "-e", endpointsFlag(fleet.URLs()), "--concurrency", "64", "--max-tokens", "16",
			"--progress", "0", "-o", out, in)
		total += time.Since(start)
		if res.code != cli.ExitOK {
			b.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "req/s")
}

// fleetRun runs infer on a time-scaled simulated fleet and measures, while
// the run is in its steady state (between 10% and 90% of the answers), how
// full the servers' slots are and how close the fleet's output comes to
// its ideal: every endpoint decoding a full batch all the time.
func fleetRun(b *testing.B, policy string, perEndpoint map[int]llmsim.Faults, endpoints, prompts int, scale float64) (util, ideal, tokPerSec float64) {
	b.Helper()
	cfg := llmsim.Config{TimeScale: scale, PerEndpoint: perEndpoint}
	fleet := startFleet(b, cfg, endpoints)
	in := benchPrompts(b, prompts)
	out := filepath.Join(b.TempDir(), "gen.jsonl")
	maxRunning := llmsim.DefaultMaxRunning

	var mu sync.Mutex
	var samples, busy float64
	var t0, t1 time.Time
	var tok0, tok1 int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			st := fleet.Stats()
			done := float64(st.Completed) / float64(prompts)
			mu.Lock()
			if done >= 0.1 && done <= 0.9 {
				if t0.IsZero() {
					t0, tok0 = time.Now(), st.GeneratedTokens
				}
				t1, tok1 = time.Now(), st.GeneratedTokens
				samples++
				busy += float64(st.Running) / float64(maxRunning*endpoints)
			}
			mu.Unlock()
		}
	}()
	res := runInfer(b, 10*time.Minute, "", "-e", endpointsFlag(fleet.URLs()), "--policy", policy, "--max-tokens", "512",
		"--progress", "0", "-o", out, in)
	close(stop)
	wg.Wait()
	if res.code != cli.ExitOK {
		b.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	if samples == 0 || !t1.After(t0) {
		b.Fatalf("no steady state observed")
	}
	// The ideal: each endpoint's full batch of maxRunning tokens per step,
	// slowed by its Slow factor, in real time.
	step := llmsim.DefaultTiming().StepDuration(maxRunning, 0)
	var idealRate float64
	for i := 0; i < endpoints; i++ {
		slow := 1.0
		if f, ok := perEndpoint[i]; ok && f.Slow > 0 {
			slow = f.Slow
		}
		idealRate += float64(maxRunning) / (step.Seconds() * slow) * scale
	}
	tokPerSec = float64(tok1-tok0) / t1.Sub(t0).Seconds()
	return 100 * busy / samples, 100 * tokPerSec / idealRate, tokPerSec
}

// BenchmarkFleet: the calibrated 8-endpoint fleet (48 slots each), time
// scaled: slot utilisation and fraction of ideal throughput in steady state.
func BenchmarkFleet(b *testing.B) {
	for i := 0; i < b.N; i++ {
		util, ideal, tps := fleetRun(b, "least-outstanding", nil, 8, 6000, 100)
		b.ReportMetric(util, "slot-util-%")
		b.ReportMetric(ideal, "ideal-%")
		b.ReportMetric(tps/100, "sim-tok/s")
	}
}

// BenchmarkPolicies: a heterogeneous fleet (one endpoint of eight three
// times slower), least-outstanding against round-robin.
func BenchmarkPolicies(b *testing.B) {
	for _, policy := range []string{"least-outstanding", "round-robin"} {
		b.Run(policy, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				util, ideal, tps := fleetRun(b, policy, map[int]llmsim.Faults{0: {Slow: 3}}, 8, 6000, 100)
				b.ReportMetric(util, "slot-util-%")
				b.ReportMetric(ideal, "ideal-%")
				b.ReportMetric(tps/100, "sim-tok/s")
			}
		})
	}
}

// BenchmarkMemory: peak RSS of the infer binary over a large input against
// a zero-latency simulator (1,000,000 prompts; TOKENMILL_BENCH_PROMPTS
// sets another count).
func BenchmarkMemory(b *testing.B) {
	n := 1000000
	if s := os.Getenv("TOKENMILL_BENCH_PROMPTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	fleet := startFleet(b, llmsim.Config{Instant: true}, 2)
	in := benchPrompts(b, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out := filepath.Join(b.TempDir(), "gen.jsonl")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		cmd := exec.CommandContext(ctx, testbin.Path("infer"), "-e", strings.Join(fleet.URLs(), ","), "--concurrency", "64",
			"--max-tokens", "16", "--progress", "0", "-o", out, in)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Peak RSS from /proc: rusage's maxrss of a child counts the
		// parent's pages it shared between fork and exec.
		peak := make(chan int64, 1)
		go func() { peak <- watchPeakRSS(cmd.Process.Pid) }()
		err := cmd.Wait()
		cancel()
		if err != nil {
			b.Fatalf("%v\n%s", err, stderr.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		b.ReportMetric(float64(<-peak)/1024, "peak-RSS-MB")
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "req/s")
		// CPU time of infer alone per request: what the client costs, even
		// on a machine too busy for req/s to mean much.
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(float64(cpu.Microseconds())/float64(n), "infer-cpu-µs/req")
	}
}

// watchPeakRSS polls the process's VmHWM (its peak RSS, in KiB) until the
// process is gone, and returns the last value read.
func watchPeakRSS(pid int) int64 {
	var peak int64
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return peak
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				if v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64); err == nil && v > peak {
					peak = v
				}
			}
		}
		if strings.Contains(string(b), "State:\tZ") {
			return peak
		}
		time.Sleep(20 * time.Millisecond)
	}
}
