package benchsuite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

// FleetCmd runs infer against a time-scaled llmsim fleet, --runs times,
// each time on a fresh fleet (so a crash-after fault strikes every run),
// and compares the tokens infer delivered with what the fleet could give.
//
// While infer runs, every endpoint's /health and /metrics and infer's own
// /metrics are polled. The steady state is the stretch between 10% and 90%
// of the delivered tokens: there, the fleet's ideal is each endpoint's
// calibrated full-batch rate (48 slots decoding, slowed by its slow factor)
// for the time it was up, and its share of the ideal is what the endpoints
// decoded in that time (their generation_tokens_total), never what infer
// delivered: an answer delivered in the window was partly decoded before
// it, and a window short beside an answer's time (a small run, the drain
// of the last answers) would count more than the fleet can decode. Slot
// utilisation is running requests over the slots of the endpoints that
// were up.
type FleetCmd struct {
	Results    string        `help:"Append the result to this JSONL file." required:""`
	Group      string        `help:"Table the result belongs to." default:"fleet"`
	Name       string        `help:"Row name (default: the policy)."`
	Runs       int           `help:"Runs on a fresh fleet each; medians are reported." default:"3"`
	LLMSim     string        `name:"llmsim" help:"The llmsim binary." default:"llmsim"`
	Infer      string        `help:"The infer binary." default:"infer"`
	Endpoints  int           `help:"Simulated endpoints." default:"8"`
	TimeScale  float64       `help:"llmsim --time-scale: simulated time runs this many times faster." default:"20"`
	Fault      []string      `help:"llmsim --fault spec, e.g. 7=slow:3 (repeatable; endpoints named by index)." sep:"none"`
	Policy     string        `help:"infer --policy." default:"least-outstanding"`
	MaxTokens  int           `help:"infer --max-tokens." default:"1024"`
	InferArgs  []string      `help:"More infer flags, each one argument (repeatable)." sep:"none"`
	Prompts    string        `help:"Prompt records to generate answers for." required:""`
	Records    int64         `help:"Prompts in the file (for the table)."`
	Poll       time.Duration `help:"Polling interval." default:"100ms"`
	Timeout    time.Duration `help:"Longest run." default:"20m"`
	Work       string        `help:"Directory for outputs and logs (default: a temporary one, removed)."`
	ShowPrefix string        `help:"Shown before the commands in the table, e.g. the directory they run in."`
}

// fleetSample is one poll of the fleet and the client.
type fleetSample struct {
	at        time.Duration
	delivered float64 // completion tokens infer has written
	up        []bool
	running   []float64
	// From llmsim's /llmsim/decoded, per endpoint: its
	// generation_tokens_total, prompt_tokens_total (prefilled), the
	// simulated time they were decoded by, and its clock's.
	generated, prompted, through, clock []float64
}

// fleetRun is what one run measured.
type fleetRun struct {
	run                                            Run
	steadyTokS, idealTokS                          float64
	wholeTokS, wholeIdealTokS, utilPct, simGenTokS float64
	decodedPct, decodedPrefillPct                  float64
	downSimSeconds                                 float64
	ok, failed                                     int64
	retries                                        float64
}

// Run measures the fleet --runs times.
func (c *FleetCmd) Run(ctx context.Context, env *cli.Env) error {
	if c.Runs < 1 || c.Endpoints < 1 || c.TimeScale <= 0 {
		return cli.Usagef("--runs, --endpoints and --time-scale must be positive")
	}
	if _, err := slowFactors(c.Fault, c.Endpoints); err != nil {
		return cli.Usagef("%v", err)
	}
	res, err := c.measure(ctx, env.Logf)
	if err != nil {
		return err
	}
	return appendResult(c.Results, res)
}

// measure runs the fleet and infer --runs times and returns the row of
// their medians.
func (c *FleetCmd) measure(ctx context.Context, logf func(string, ...any)) (*Result, error) {
	slow, err := slowFactors(c.Fault, c.Endpoints)
	if err != nil {
		return nil, err
	}
	name := c.Name
	if name == "" {
		name = c.Policy
	}
	res := &Result{Group: c.Group, Name: name, Records: c.Records, OutRecords: -1, Load1: loadAverage(), Metrics: map[string]float64{}}
	res.Command = c.ShowPrefix + shellJoin(c.llmsimArgs("FILE")) + " &\n" + c.ShowPrefix + shellJoin(c.inferArgs([]string{"URLS"}, "HOST:PORT", "gen.jsonl"))
	var runs []fleetRun
	for i := 0; i < c.Runs; i++ {
		fr, err := c.runOnce(ctx, slow)
		if err != nil {
			return nil, fmt.Errorf("fleet %s run %d: %w", name, i+1, err)
		}
		logf("fleet/%s run %d: %.0f tok/s (simulated) delivered in steady state, %.0f decoded: %.1f%% of ideal %.0f (%.1f%% with prefill), slots %.1f%% busy; whole run %.1f%%; %d ok, %d failed (load %.2f)",
			name, i+1, fr.steadyTokS, fr.simGenTokS, fr.decodedPct, fr.idealTokS, fr.decodedPrefillPct, fr.utilPct,
			100*fr.wholeTokS/fr.wholeIdealTokS, fr.ok, fr.failed, loadAverage())
		runs = append(runs, fr)
		res.Runs = append(res.Runs, fr.run)
		res.OutRecords = fr.ok
	}
	med := func(f func(fleetRun) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	res.Metrics["tok_s"] = med(func(r fleetRun) float64 { return r.steadyTokS })
	res.Metrics["ideal_tok_s"] = med(func(r fleetRun) float64 { return r.idealTokS })
	res.Metrics["ideal_pct"] = med(func(r fleetRun) float64 { return r.decodedPct })
	res.Metrics["ideal_prefill_pct"] = med(func(r fleetRun) float64 { return r.decodedPrefillPct })
	res.Metrics["delivered_pct"] = med(func(r fleetRun) float64 { return 100 * r.steadyTokS / r.idealTokS })
	res.Metrics["whole_pct"] = med(func(r fleetRun) float64 { return 100 * r.wholeTokS / r.wholeIdealTokS })
	res.Metrics["util_pct"] = med(func(r fleetRun) float64 { return r.utilPct })
	res.Metrics["sim_gen_tok_s"] = med(func(r fleetRun) float64 { return r.simGenTokS })
	res.Metrics["down_sim_s"] = med(func(r fleetRun) float64 { return r.downSimSeconds })
	res.Metrics["failed"] = med(func(r fleetRun) float64 { return float64(r.failed) })
	res.Metrics["retries"] = med(func(r fleetRun) float64 { return r.retries })
	return res, nil
}

// slowFactors reads the slow:F entries of the fault specs, by endpoint.
func slowFactors(faults []string, endpoints int) ([]float64, error) {
	slow := make([]float64, endpoints)
	for i := range slow {
		slow[i] = 1
	}
	for _, spec := range faults {
		target, kvs, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("--fault %q: want INDEX=key:value[,key:value]", spec)
		}
		idx, err := strconv.Atoi(target)
		if err != nil || idx < 0 || idx >= endpoints {
			return nil, fmt.Errorf("--fault %q: endpoints are named by index 0..%d here", spec, endpoints-1)
		}
		for kv := range strings.SplitSeq(kvs, ",") {
			if v, ok := strings.CutPrefix(kv, "slow:"); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 1 {
					return nil, fmt.Errorf("--fault %q: slow must be a number >= 1", spec)
				}
				slow[idx] = f
			}
		}
	}
	return slow, nil
}

func (c *FleetCmd) llmsimArgs(readyFile string) []string {
	listen := make([]string, c.Endpoints)
	for i := range listen {
		listen[i] = "127.0.0.1:0"
	}
	args := []string{c.LLMSim, "--listen", strings.Join(listen, ","), "--time-scale", strconv.FormatFloat(c.TimeScale, 'g', -1, 64), "--ready-file", readyFile}
	for _, f := range c.Fault {
		args = append(args, "--fault", f)
	}
	return args
}

func (c *FleetCmd) inferArgs(urls []string, metricsAddr, out string) []string {
	args := []string{c.Infer, "-e", strings.Join(urls, ","), "--policy", c.Policy, "--max-tokens", strconv.Itoa(c.MaxTokens),
		"--progress-interval", "0", "--metrics-addr", metricsAddr}
	args = append(args, c.InferArgs...)
	return append(args, "-o", out, c.Prompts)
}

func (c *FleetCmd) runOnce(ctx context.Context, slow []float64) (fleetRun, error) {
	var fr fleetRun
	work := c.Work
	if work == "" {
		d, err := os.MkdirTemp("", "benchmark-fleet-*")
		if err != nil {
			return fr, err
		}
		defer os.RemoveAll(d)
		work = d
	} else {
		os.RemoveAll(work)
		if err := os.MkdirAll(work, 0o755); err != nil {
			return fr, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()

	ready := filepath.Join(work, "llmsim.urls")
	simLog, err := os.Create(filepath.Join(work, "llmsim.log"))
	if err != nil {
		return fr, err
	}
	defer simLog.Close()
	sa := c.llmsimArgs(ready)
	sim := exec.Command(sa[0], sa[1:]...)
	sim.Stdout, sim.Stderr = simLog, simLog
	if err := sim.Start(); err != nil {
		return fr, err
	}
	simDone := make(chan struct{})
	go func() { sim.Wait(); close(simDone) }()
	defer func() {
		sim.Process.Signal(syscall.SIGTERM)
		select {
		case <-simDone:
		case <-time.After(10 * time.Second):
			sim.Process.Kill()
			<-simDone
		}
	}()
	urls, err := waitReady(ctx, ready, simDone, c.Endpoints)
	if err != nil {
		log, _ := os.ReadFile(simLog.Name())
		return fr, fmt.Errorf("llmsim: %v\n%s", err, tail(log, 2000))
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	slots := make([]float64, len(urls))
	for i, u := range urls {
		slots[i] = float64(maxRunning(ctx, client, u))
	}

	addr, err := freeAddr()
	if err != nil {
		return fr, err
	}
	out := filepath.Join(work, "gen.jsonl")
	ia := c.inferArgs(urls, addr, out)
	inf := exec.CommandContext(ctx, ia[0], ia[1:]...)
	var stderr strings.Builder
	inf.Stderr = &stderr
	start := time.Now()
	if err := inf.Start(); err != nil {
		return fr, err
	}
	infDone := make(chan struct{})
	var samples []fleetSample
	var retries float64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(c.Poll)
		defer tick.Stop()
		for {
			select {
			case <-infDone:
				return
			case <-tick.C:
			}
			s, r, ok := pollFleet(client, urls, addr)
			if ok {
				s.at = time.Since(start)
				samples = append(samples, s)
				retries = r
			}
		}
	}()
	err = inf.Wait()
	wall := time.Since(start)
	close(infDone)
	wg.Wait()
	if err != nil {
		return fr, fmt.Errorf("infer: %v\n%s", err, tail([]byte(stderr.String()), 3000))
	}
	if ru, ok := inf.ProcessState.SysUsage().(*syscall.Rusage); ok {
		fr.run = Run{Wall: wall, User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano()), MaxRSSKB: ru.Maxrss}
	}
	tot, err := sumOutput(out)
	if err != nil {
		return fr, err
	}
	fr.ok = tot.answers
	if n, err := countLines(filepath.Join(work, "gen.errors.jsonl")); err == nil {
		fr.failed = n
	}
	fr.retries = retries
	return c.analyse(fr, samples, slots, slow, tot, wall)
}

// analyse turns the samples into the run's figures, in simulated tok/s.
func (c *FleetCmd) analyse(fr fleetRun, samples []fleetSample, slots, slow []float64, tot outputTotals, wall time.Duration) (fleetRun, error) {
	if len(samples) < 4 || tot.completion == 0 {
		return fr, fmt.Errorf("too few samples (%d) or no tokens delivered: the run was too short to measure", len(samples))
	}
	timing := llmsim.DefaultTiming()
	rate := make([]float64, len(slots)) // decode only: the calibration, tokens a simulated second
	for i := range slots {
		t := timing
		t.Slow = slow[i]
		rate[i] = slots[i] / t.StepDuration(int(slots[i]), 0).Seconds()
	}
	final := tot.completion
	a, b := -1, -1
	for i, s := range samples {
		if a < 0 && s.delivered >= 0.1*final {
			a = i
		}
		if b < 0 && s.delivered >= 0.9*final {
			b = i
		}
	}
	if a < 0 || b <= a {
		return fr, fmt.Errorf("no steady state observed (%d samples)", len(samples))
	}
	window := (samples[b].at - samples[a].at).Seconds()
	scale := c.TimeScale
	fr.steadyTokS = (samples[b].delivered - samples[a].delivered) / window / scale
	var ideal, busy, cap float64
	for k := a; k < b; k++ {
		dt := (samples[k+1].at - samples[k].at).Seconds()
		for i := range slots {
			if samples[k].up[i] {
				ideal += rate[i] * dt
				busy += samples[k].running[i] * dt
				cap += slots[i] * dt
			}
		}
	}
	fr.idealTokS = ideal / window
	if cap > 0 {
		fr.utilPct = 100 * busy / cap
	}
	fr.simGenTokS = generatedBetween(samples[a], samples[b]) / window / scale
	fr.decodedPct, fr.decodedPrefillPct = decodedShare(samples[a:b+1], rate, slow, timing.PrefillPerToken.Seconds())

	// The whole run, ramp-up and tail included; before the first sample
	// and after the last, the fleet counts as up.
	var wholeIdeal, down float64
	from := time.Duration(0)
	for k, s := range samples {
		to := wall
		if k+1 < len(samples) {
			to = samples[k+1].at
		}
		dt := (to - from).Seconds()
		from = to
		for i := range slots {
			if s.up[i] {
				wholeIdeal += rate[i] * dt
			} else {
				down += dt
			}
		}
	}
	fr.wholeTokS = final / wall.Seconds() / scale
	fr.wholeIdealTokS = wholeIdeal / wall.Seconds()
	fr.downSimSeconds = down * scale
	return fr, nil
}

// decodedShare is the percentage of the ideal the endpoints decoded over
// samples, and of the ideal less the prefill they did ("with prefill").
// Each endpoint counts over each stretch of samples it was up at: the
// tokens it decoded (generation_tokens_total) against its full batch's
// rate over the simulated time the stretch spans (the longer of the time
// its counters were decoded by and its clock's, both from llmsim's
// /llmsim/decoded, so that time idle counts), less, with
// prefill, the time its steps spent prefilling (prompt_tokens_total). A
// step of n sequences lasts at least what n decode at the full batch's
// rate plus its prefill, so neither figure can pass 100%, wherever the
// window and the readings fall.
func decodedShare(samples []fleetSample, rate, slow []float64, prefillPerToken float64) (pct, prefillPct float64) {
	var decoded, ideal, idealPrefill float64
	for i := range rate {
		// from is the first sample of the stretch up to k.
		from := -1
		for k := range samples {
			up := samples[k].up[i]
			if up && from < 0 {
				from = k
			}
			last := k == len(samples)-1 || !samples[k+1].up[i]
			if !up || !last || from < 0 {
				continue
			}
			var gen, prompt float64
			for j := from; j < k; j++ {
				gen += counterDelta(samples[j].generated[i], samples[j+1].generated[i])
				prompt += counterDelta(samples[j].prompted[i], samples[j+1].prompted[i])
			}
			a, b := samples[from], samples[k]
			span := max(b.through[i]-a.through[i], b.clock[i]-a.clock[i])
			decoded += gen
			ideal += rate[i] * span
			idealPrefill += rate[i] * max(0, span-prompt*prefillPerToken*slow[i])
			from = -1
		}
	}
	if ideal > 0 {
		pct = 100 * decoded / ideal
	}
	if idealPrefill > 0 {
		prefillPct = 100 * decoded / idealPrefill
	}
	return pct, prefillPct
}

// counterDelta is what a counter counted between two readings; one that
// went down restarted with its endpoint.
func counterDelta(a, b float64) float64 {
	if b >= a {
		return b - a
	}
	return b
}

// generatedBetween is the tokens the simulator generated between two
// samples; a counter that went down restarted with its endpoint.
func generatedBetween(a, b fleetSample) float64 {
	var sum float64
	for i := range a.generated {
		sum += counterDelta(a.generated[i], b.generated[i])
	}
	return sum
}

// waitReady waits for llmsim's ready file and returns its URLs.
func waitReady(ctx context.Context, path string, exited <-chan struct{}, want int) ([]string, error) {
	deadline := time.After(30 * time.Second)
	for {
		if data, err := os.ReadFile(path); err == nil {
			urls := strings.Fields(string(data))
			if len(urls) == want {
				return urls, nil
			}
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("exited before it was ready")
		case <-deadline:
			return nil, fmt.Errorf("not ready after 30 s")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// maxRunning asks an SGLang server for its max_running_requests.
func maxRunning(ctx context.Context, client *http.Client, url string) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/get_server_info", nil)
	resp, err := client.Do(req)
	if err != nil {
		return llmsim.DefaultMaxRunning
	}
	defer resp.Body.Close()
	var info struct {
		MaxRunning int `json:"max_running_requests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || info.MaxRunning <= 0 {
		return llmsim.DefaultMaxRunning
	}
	return info.MaxRunning
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// pollFleet reads every endpoint's health and metrics and infer's metrics;
// ok is false until infer's metrics answer.
func pollFleet(client *http.Client, urls []string, inferAddr string) (s fleetSample, retries float64, ok bool) {
	s.up = make([]bool, len(urls))
	s.running = make([]float64, len(urls))
	s.generated = make([]float64, len(urls))
	s.prompted = make([]float64, len(urls))
	s.through = make([]float64, len(urls))
	s.clock = make([]float64, len(urls))
	m, err := scrape(client, "http://"+inferAddr+"/metrics")
	if err != nil {
		return s, 0, false
	}
	s.delivered = m[`tokenmill_infer_tokens_total{kind="completion"}`]
	retries = m["tokenmill_infer_retries_total"]
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(u + "/health")
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return
			}
			sm, err := scrape(client, u+"/metrics")
			if err != nil {
				return
			}
			d, err := readDecoded(client, u)
			if err != nil {
				return
			}
			s.up[i] = true
			for k, v := range sm {
				if strings.HasPrefix(k, "sglang:num_running_reqs") {
					s.running[i] = v
				}
			}
			s.generated[i], s.prompted[i], s.through[i], s.clock[i] = d.Generated, d.Prompt, d.Through, d.Clock
		}()
	}
	wg.Wait()
	return s, retries, true
}

// decodedReading is llmsim's GET /llmsim/decoded: its token counters and
// the simulated times they were decoded by and read at, read together.
type decodedReading struct {
	Prompt    float64 `json:"prompt_tokens_total"`
	Generated float64 `json:"generation_tokens_total"`
	Through   float64 `json:"decoded_through_seconds"`
	Clock     float64 `json:"clock_seconds"`
}

func readDecoded(client *http.Client, base string) (decodedReading, error) {
	var d decodedReading
	resp, err := client.Get(base + "/llmsim/decoded")
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return d, fmt.Errorf("%s/llmsim/decoded: %s", base, resp.Status)
	}
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

// scrape reads a Prometheus text page into name{labels} -> value.
func scrape(client *http.Client, url string) (map[string]float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// outputTotals sums infer's output file.
type outputTotals struct {
	answers    int64
	completion float64
}

func sumOutput(path string) (outputTotals, error) {
	var t outputTotals
	f, err := os.Open(path)
	if err != nil {
		return t, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var g struct {
			Output struct {
				Usage struct {
					Completion float64 `json:"completion_tokens"`
				} `json:"usage"`
			} `json:"output"`
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			return t, fmt.Errorf("%s: %v", path, err)
		}
		t.answers++
		t.completion += g.Output.Usage.Completion
	}
	return t, sc.Err()
}
