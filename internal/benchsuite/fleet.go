package benchsuite

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/lifeline"
	"tokenmill/internal/llmsim"
)

// The fleet section: infer on a time-scaled llmsim fleet of 8 endpoints, one
// slow and one crashing, a fresh fleet each run. The share of the ideal counts
// what the endpoints decoded in the steady state (10% to 90% of the tokens
// delivered), not what infer delivered, which was partly decoded before.
const (
	fleetTimeScale = 20 // the fleet's llmsim runs this many times faster than real GPUs
	fleetEndpoints = 8
	fleetPoll      = 100 * time.Millisecond
	fleetSlow      = 3 // endpoint 7 is this many times slower
)

// fleetCrashAfter is when endpoint 6 of the fleet crashes (and comes
// back): about half of its share of the prompts.
func fleetCrashAfter(prompts int) int { return prompts * 3 / 40 }

var fleetSection = &section{
	name: "fleet", heading: "## infer on the calibrated 8-endpoint fleet",
	needs: []string{"prompts-big"},
	measure: func(ctx context.Context, h *harness) error {
		const prompts = "data/fleet-prompts.jsonl"
		err := h.head("data/prompts-big.jsonl", prompts, h.sz.FleetPrompts)
		for _, policy := range []string{"least-outstanding", "round-robin"} {
			if err == nil {
				err = h.fleetRow(ctx, policy, prompts)
			}
		}
		return err
	},
}

// scaledWaits are infer's waits (probing, backoff), real time, scaled like
// a fleet's clock so that they cost what they would on real GPUs.
func scaledWaits(scale int) []string {
	ms := func(real int) string { return fmt.Sprintf("%dms", real/scale) }
	return []string{"--probe-interval", ms(2000), "--backoff", ms(1000), "--max-backoff", ms(60000)}
}

// fleetSample is one poll of the fleet and the client.
type fleetSample struct {
	at        time.Duration
	delivered float64 // completion tokens infer has written
	retries   float64 // infer's so far
	up        []bool
	running   []float64
	// From /llmsim/decoded per endpoint: generation_tokens_total,
	// prompt_tokens_total, the simulated time they were decoded by, its clock.
	generated, prompted, through, clock []float64
}

// fleetRow runs infer with a policy on a fresh fleet FleetRuns times and
// keeps the row of the runs' medians.
func (h *harness) fleetRow(ctx context.Context, policy, prompts string) error {
	simFlags := []string{"--time-scale", strconv.Itoa(fleetTimeScale), "--fault", fmt.Sprintf("7=slow:%d", fleetSlow),
		"--fault", fmt.Sprintf("6=crash-after:%d,restart-after:60s,startup-delay:20s", fleetCrashAfter(h.sz.FleetPrompts))}
	inferArgs := func(urls, metrics, out string) []string {
		args := []string{"infer", "-e", urls, "--policy", policy, "--max-tokens", "1024", "--progress-interval", "0", "--metrics-addr", metrics}
		return slices.Concat(args, scaledWaits(fleetTimeScale), []string{"-o", out, prompts})
	}
	listen := strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", fleetEndpoints), ",")
	res := &Result{Group: "fleet", Name: policy, Records: int64(h.sz.FleetPrompts), OutRecords: -1, Load1: loadAverage(), Metrics: map[string]float64{},
		Command: shellJoin(append([]string{"llmsim", "--listen", listen, simFlags[0], simFlags[1], "--ready-file", "FILE"}, simFlags[2:]...)) + " &\n" +
			shellJoin(inferArgs("URLS", "HOST:PORT", "gen.jsonl"))}
	values := map[string][]float64{}
	for i := range h.sz.FleetRuns {
		run, m, err := h.fleetOnce(ctx, simFlags, inferArgs)
		if err != nil {
			return fmt.Errorf("fleet %s run %d: %w", policy, i+1, err)
		}
		h.logf("fleet/%s run %d: %v (load %.2f)", policy, i+1, m, loadAverage())
		res.Runs, res.OutRecords = append(res.Runs, run), int64(m["ok"])
		for k, v := range m {
			values[k] = append(values[k], v)
			res.Metrics[k] = median(values[k]) // of the runs so far
		}
	}
	delete(res.Metrics, "ok")
	h.add(res)
	return nil
}

// fleetOnce runs infer once on a fresh fleet, polling both, and returns
// infer's run and the run's figures.
func (h *harness) fleetOnce(ctx context.Context, simFlags []string, inferArgs func(urls, metrics, out string) []string) (Run, map[string]float64, error) {
	sim, err := h.startSim(ctx, fleetEndpoints, h.path("logs/fleet-llmsim.log"), simFlags...)
	if err != nil {
		return Run{}, nil, err
	}
	defer sim.stop()
	port, err := lifeline.FreePort(0) // for infer's metrics
	if err != nil {
		return Run{}, nil, err
	}
	// infer writes in llmsim's scratch directory, removed with it.
	addr, out, stderr := "127.0.0.1:"+strconv.Itoa(port), filepath.Join(sim.dir, "gen.jsonl"), filepath.Join(sim.dir, "infer.err")
	// infer is measured as every row is, polled until it exits; the writeback
	// runOnce waits for is done first, so that the samples' clock starts with infer.
	syscall.Sync()
	var run Run
	start, exited := time.Now(), make(chan error, 1)
	go func() {
		var err error
		run, _, err = h.runOnce(ctx, &Spec{}, inferArgs(strings.Join(sim.urls, ","), addr, out), filepath.Join(sim.dir, "infer.out"), stderr)
		exited <- err
	}()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	var samples []fleetSample
	for tick := time.Tick(fleetPoll); len(exited) == 0; <-tick {
		if s, ok := pollFleet(client, sim.urls, addr); ok {
			s.at = time.Since(start)
			samples = append(samples, s)
		}
	}
	if err := <-exited; err != nil {
		log, _ := os.ReadFile(stderr)
		return Run{}, nil, fmt.Errorf("infer: %v\n%s", err, tail(log, 3000))
	}
	var ok, completion float64
	if err := eachJSON(out, func(g *generation) error {
		ok, completion = ok+1, completion+g.Output.Usage["completion_tokens"]
		return nil
	}); err != nil {
		return Run{}, nil, err
	}
	failed, _ := countLines(filepath.Join(sim.dir, "gen.errors.jsonl"))
	// The fleet runs llmsim's default slots; endpoint 7 is the slow one.
	slots, slow := slices.Repeat([]float64{llmsim.DefaultMaxRunning}, fleetEndpoints), slices.Repeat([]float64{1}, fleetEndpoints)
	slow[7] = fleetSlow
	m, err := analyse(samples, slots, slow, completion, run.Wall, fleetTimeScale)
	if err == nil {
		m["ok"], m["failed"], m["retries"] = ok, float64(failed), samples[len(samples)-1].retries
	}
	return run, m, err
}

// analyse turns the samples into a run's figures, in simulated tok/s:
// delivered (tok_s) and decoded (sim_gen_tok_s) in the steady state, the
// fleet's ideal and the shares of it, slot utilisation, the whole run's
// share and the endpoints' downtime.
func analyse(samples []fleetSample, slots, slow []float64, final float64, wall time.Duration, scale float64) (map[string]float64, error) {
	if len(samples) < 4 || final == 0 {
		return nil, fmt.Errorf("too few samples (%d) or no tokens delivered: the run was too short to measure", len(samples))
	}
	timing := llmsim.DefaultTiming()
	rate := make([]float64, len(slots)) // decode only: the calibration, tokens a simulated second
	for i := range slots {
		t := timing
		t.Slow = slow[i]
		rate[i] = slots[i] / t.StepDuration(int(slots[i]), 0).Seconds()
	}
	a := slices.IndexFunc(samples, func(s fleetSample) bool { return s.delivered >= 0.1*final })
	b := slices.IndexFunc(samples, func(s fleetSample) bool { return s.delivered >= 0.9*final })
	if a < 0 || b <= a {
		return nil, fmt.Errorf("no steady state observed (%d samples)", len(samples))
	}
	// Each endpoint counts from one sample to the next as the first found it:
	// in the steady state between a and b, and in the whole run, ramp-up and
	// tail included (from 0 as the first sample found it, to wall as the last).
	var ideal, busy, capacity, generated, wholeIdeal, down float64
	for k, s := range samples {
		from, to := s.at, wall
		if k == 0 {
			from = 0
		}
		if k+1 < len(samples) {
			to = samples[k+1].at
		}
		for i := range slots {
			if dt := (to - from).Seconds(); s.up[i] {
				wholeIdeal += rate[i] * dt
			} else {
				down += dt
			}
			if dt := (to - s.at).Seconds(); s.up[i] && k >= a && k < b {
				ideal, busy, capacity = ideal+rate[i]*dt, busy+s.running[i]*dt, capacity+slots[i]*dt
			}
		}
	}
	for i := range samples[a].generated {
		generated += counterDelta(samples[a].generated[i], samples[b].generated[i])
	}
	window := (samples[b].at - samples[a].at).Seconds()
	m := map[string]float64{"tok_s": (samples[b].delivered - samples[a].delivered) / window / scale, "ideal_tok_s": ideal / window,
		"sim_gen_tok_s": generated / window / scale, "util_pct": pct(busy, capacity)}
	m["delivered_pct"] = 100 * m["tok_s"] / m["ideal_tok_s"]
	m["ideal_pct"], m["ideal_prefill_pct"] = decodedShare(samples[a:b+1], rate, slow, timing.PrefillPerToken.Seconds())
	m["whole_pct"], m["down_sim_s"] = 100*(final/wall.Seconds()/scale)/(wholeIdeal/wall.Seconds()), down*scale
	return m, nil
}

// decodedShare is the percentage of the ideal the endpoints decoded over
// samples, and of the ideal less their steps' prefill: each endpoint over
// each stretch it was up, against its full batch's rate over the stretch's
// simulated time (the longer of its counters' and its clock's, so that idle
// time counts). Neither can pass 100%, wherever the readings fall.
func decodedShare(samples []fleetSample, rate, slow []float64, prefillPerToken float64) (share, prefillShare float64) {
	var decoded, ideal, idealPrefill float64
	for i := range rate {
		for from, k := 0, 0; k < len(samples); k++ { // from: the first sample after one down
			if !samples[k].up[i] {
				from = k + 1
			} else if k+1 == len(samples) || !samples[k+1].up[i] { // a stretch up ends at k
				var gen, prompt float64
				for j := from; j < k; j++ {
					gen += counterDelta(samples[j].generated[i], samples[j+1].generated[i])
					prompt += counterDelta(samples[j].prompted[i], samples[j+1].prompted[i])
				}
				a, b := samples[from], samples[k]
				span := max(b.through[i]-a.through[i], b.clock[i]-a.clock[i])
				decoded, ideal, idealPrefill = decoded+gen, ideal+rate[i]*span, idealPrefill+rate[i]*max(0, span-prompt*prefillPerToken*slow[i])
			}
		}
	}
	return pct(decoded, ideal), pct(decoded, idealPrefill)
}

// counterDelta is what a counter counted between two readings; one that
// went down restarted with its endpoint.
func counterDelta(a, b float64) float64 {
	if b >= a {
		return b - a
	}
	return b
}

// pollFleet reads infer's metrics and every endpoint's health, metrics
// and decoded counters; ok is false until infer's metrics answer.
func pollFleet(client *http.Client, urls []string, inferAddr string) (s fleetSample, ok bool) {
	page, err := get(client, "http://"+inferAddr+"/metrics")
	if err != nil {
		return s, false
	}
	zeros := func() []float64 { return make([]float64, len(urls)) }
	s = fleetSample{delivered: promValue(page, `tokenmill_infer_tokens_total{kind="completion"}`), up: make([]bool, len(urls)),
		retries: promValue(page, "tokenmill_infer_retries_total"), running: zeros(), generated: zeros(), prompted: zeros(), through: zeros(), clock: zeros()}
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			var d map[string]float64
			_, err := get(client, u+"/health")
			page, err2 := get(client, u+"/metrics")
			body, err3 := get(client, u+"/llmsim/decoded")
			if err == nil && err2 == nil && err3 == nil && json.Unmarshal(body, &d) == nil {
				s.up[i], s.running[i] = true, promValue(page, "sglang:num_running_reqs")
				s.generated[i], s.prompted[i] = d["generation_tokens_total"], d["prompt_tokens_total"]
				s.through[i], s.clock[i] = d["decoded_through_seconds"], d["clock_seconds"]
			}
		})
	}
	wg.Wait()
	return s, true
}

// get reads the body of a 200.
func get(client *http.Client, url string) ([]byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return body, err
}

// promValue is the value of a metric, named with or without its labels,
// in a Prometheus text page; 0 where it is not.
func promValue(page []byte, metric string) float64 {
	var v float64
	if m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `(\{[^}]*\})? (\S+)$`).FindSubmatch(page); m != nil {
		v, _ = strconv.ParseFloat(string(m[2]), 64)
	}
	return v
}

func init() {
	parts["fleet"] = func(w io.Writer, h *harness) {
		rows := h.rows(w, "fleet")
		if len(rows) == 0 {
			return
		}
		columns(rows, "policy=**", "delivered tok/s=tok_s:0", "decoded tok/s=sim_gen_tok_s:0", "fleet ideal tok/s=ideal_tok_s:0", "decoded % of ideal=ideal_pct:1",
			"% of ideal with prefill=ideal_prefill_pct:1", "slot utilisation %=util_pct:1", "whole run % of ideal=whole_pct:1", "endpoint downtime s=down_sim_s:0",
			"answers ok=out", "failed=failed:0", "retries=retries:0", "infer wall s=wall_s:1", "infer CPU s=cpu_s:1", "infer peak RSS MB=rss_mb:1", "load=others").write(w)
		fmt.Fprintln(w)
		for _, r := range rows {
			fmt.Fprintf(w, "%s:\n\n```sh\n%s\n```\n\n", r.Name, r.Command)
		}
	}
}
