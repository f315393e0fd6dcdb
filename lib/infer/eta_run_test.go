package infer

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/simfleet"
	"tokenmill/lib/fleet"
)

// simEpoch is when virtual runs start.
var simEpoch = time.Unix(1_700_000_000, 0)

func relErr(got, want time.Duration) float64 {
	return math.Abs(got.Seconds()-want.Seconds()) / want.Seconds()
}

// progressLine is one plain progress line of infer, as far as the ETA
// goes.
type progressLine struct {
	done, total      int64
	elapsed, eta     time.Duration
	low, high        time.Duration
	mean, meanSE     int64
	hasETA, hasRange bool
	text             string
}

var (
	progressRE = regexp.MustCompile(`answers ([\d,]+)/([\d,]+) \(`)
	etaRE      = regexp.MustCompile(`\| ETA ([^ ,]+)(?: \((\S+)-(\S+)\))?, mean answer ([\d,]+)±([\d,]+) tok \| (\S+)$`)
)

// parseShortDuration reads shortDuration's forms: 19h02m, 4m05s, 12.3s
// (all of them Go durations).
func parseShortDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }

func atoiCommas(s string) int64 {
	n, _ := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	return n
}

func parseProgress(line string) (progressLine, bool) {
	p := progressLine{text: line}
	m := progressRE.FindStringSubmatch(line)
	if m == nil {
		return p, false
	}
	p.done, p.total = atoiCommas(m[1]), atoiCommas(m[2])
	e := etaRE.FindStringSubmatch(line)
	if e == nil {
		return p, true
	}
	var err error
	p.mean, p.meanSE = atoiCommas(e[4]), atoiCommas(e[5])
	if p.eta, err = parseShortDuration(e[1]); err != nil {
		return p, true
	}
	if p.elapsed, err = parseShortDuration(e[6]); err != nil {
		return p, true
	}
	p.hasETA = true
	if e[2] != "" {
		p.low, _ = parseShortDuration(e[2])
		p.high, _ = parseShortDuration(e[3])
		p.hasRange = true
	}
	return p, true
}

// chatSeq is the sequence the simulator makes of a chat prompt under
// max_tokens limit, as its handler does: the prompt's tokens, and its
// natural answer length cut at the limit.
func chatSeq(system, user string, limit int, ref any) *llmsim.Seq {
	p := llmsim.Prompt{Messages: []llmsim.Message{{Role: "system", Content: system}, {Role: "user", Content: user}}}
	h, err := strconv.ParseUint(llmsim.PromptDigest(p), 16, 64)
	if err != nil {
		panic(err)
	}
	s := &llmsim.Seq{PromptTokens: llmsim.PromptTokens(&p), Target: llmsim.NaturalLength(h, 0), End: "stop", Ref: ref}
	if s.Target > limit {
		s.Target, s.End = limit, "length"
	}
	return s
}

// virtualRun is a runner on a fake clock for answers answers, its ETA
// and its progress display fed by the test, with a pool of endpoints
// that are never probed; modelContext, when not 0, is the model's context as
// the servers state it.
func virtualRun(t *testing.T, endpoints int, answers int64, maxTokens, modelContext int, capacity func(int) int) (*runner, *fakeclock.Clock, *progress) {
	t.Helper()
	fake := fakeclock.New(simEpoch)
	targets, err := fleet.ParseEndpoints(fmt.Sprintf("127.0.0.1:1-%d", endpoints))
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: &Config{Samples: 1, MaxTokens: maxTokens}, clk: fake, pool: fleet.NewPool(context.Background(), targets, fleet.Config{}), ready: newReadyQueue()}
	r.ctxLen.State(func() int { return modelContext })
	r.eta = r.newETA(capacity)
	r.c.answers.Store(answers)
	r.readerDone.Store(true)
	return r, fake, newProgress(r, false, r.eta)
}

// TestETAEarlyInSimulatedRun plays a run of infer on two simulated
// servers at their calibrated defaults (lognormal answers, median 600
// tokens, here cut at 2,048; 48 running each plus infer's queue depth of
// 2) on virtual time, feeding the estimator as the runner does, and
// checks what the progress display shows at 5% of the run against how the
// run really went: the ETA within 10% of the time the run still took, and
// the mean answer length within 10% of the final one (the answers finished
// by then average far less: the long ones are still being written).
func TestETAEarlyInSimulatedRun(t *testing.T) {
	const (
		prompts   = 8000
		endpoints = 2
		maxTokens = 2048
	)
	r, fake, prog := virtualRun(t, endpoints, prompts, maxTokens, 0, nil)
	sim := simfleet.Uniform(endpoints, llmsim.DefaultTiming(), llmsim.DefaultMaxRunning)
	sent, tokens := 0, 0
	var at5 *progressLine
	var asked time.Duration
	sim.Keep(llmsim.DefaultMaxRunning+2, func(_ int, at time.Duration) (*llmsim.Seq, bool) {
		if sent == prompts {
			return nil, false
		}
		j := &job{}
		r.eta.Started(j, 0, simEpoch.Add(at))
		sent++
		return chatSeq("Be brief.", fmt.Sprintf("Question %d: explain topic number %d in a few words.", sent-1, (sent-1)*7919%1000), maxTokens, j), true
	}, func(st simfleet.Step) bool {
		now := simEpoch.Add(st.At)
		for _, s := range st.Finished {
			r.eta.Ended(s.Ref.(*job), now, true, s.Generated, s.End)
			r.c.ok.Add(1)
			r.c.tokenRate.Add(now, int64(s.Generated))
			tokens += s.Generated
		}
		// The display asks every second; the line at 5% is kept.
		if at5 == nil && st.At-asked >= time.Second {
			asked = st.At
			fake.Set(now)
			if p, ok := parseProgress(prog.lines()[0]); ok && p.hasETA && p.done*20 >= p.total {
				at5 = &p
			}
		}
		return true
	})
	wall := sim.Now()
	if at5 == nil {
		t.Fatal("no progress line with an ETA at 5%")
	}
	finalMean := float64(tokens) / prompts
	left := wall - at5.elapsed
	t.Logf("%s\nactual: %v left of %v; mean answer %.0f tokens", at5.text, left, wall, finalMean)
	if e := relErr(at5.eta, left); e > 0.10 {
		t.Errorf("ETA at %d/%d answers was %v, the run took %v more: off by %.0f%%", at5.done, at5.total, at5.eta, left, 100*e)
	}
	if e := math.Abs(float64(at5.mean)-finalMean) / finalMean; e > 0.10 {
		t.Errorf("mean answer at %d/%d answers shown as %d tokens, the run's was %.0f: off by %.0f%%", at5.done, at5.total, at5.mean, finalMean, 100*e)
	}
	if !at5.hasRange || at5.low > at5.eta || at5.high < at5.eta {
		t.Errorf("ETA range missing or not around the ETA: %s", at5.text)
	}
}

// TestETAQueued: 64 requests in flight on a server that runs 4 at once
// (--concurrency 64 on a small server): the other 60 wait in its queue
// and are not being written. With the server's capacity (as the pool
// gives it: its metrics, its reported slots, or its measured effective
// concurrency) the ETA at half the run is within 15% of the time the run
// still took; counting every request in flight as being written, as
// infer did, it is far off.
func TestETAQueued(t *testing.T) {
	const (
		prompts   = 600
		maxTokens = 512
		slots     = 4
	)
	etaAt := func(capacity func(int) int, frac float64) (progressLine, time.Duration) {
		trace, wall := etaTrace(t, []llmsim.Timing{llmsim.DefaultTiming()}, slots, 64, prompts, maxTokens, capacity)
		for _, p := range trace {
			if p.hasETA && float64(p.done) >= frac*float64(p.total) {
				return p, wall - p.elapsed
			}
		}
		t.Fatalf("no progress line with an ETA at %.0f%% of the run", 100*frac)
		return progressLine{}, 0
	}
	for _, frac := range []float64{0.5, 0.9} {
		p, left := etaAt(func(int) int { return slots }, frac)
		t.Logf("with the capacity: %s\nactual: %v left", p.text, left)
		if e := relErr(p.eta, left); e > 0.15 {
			t.Errorf("ETA at %d/%d answers was %v, the run took %v more: off by %.0f%%", p.done, p.total, p.eta, left, 100*e)
		}
		naive, left := etaAt(nil, frac)
		t.Logf("every request in flight taken as written: %s (off by %.0f%%)", naive.text, 100*relErr(naive.eta, left))
		if frac == 0.9 && relErr(naive.eta, left) <= 0.3 {
			t.Errorf("counting the queued requests as written gave an ETA off by only %.0f%% at 90%%: the test shows nothing", 100*relErr(naive.eta, left))
		}
	}
}

// etaTrace plays a run on virtual time, one endpoint per timing running
// slots each with keep requests in flight on each, feeding the estimator
// as the runner does, and returns the progress line of every second (with
// its time) and the run's wall time.
func etaTrace(t *testing.T, timings []llmsim.Timing, slots, keep, prompts, maxTokens int, capacity func(int) int) ([]progressLine, time.Duration) {
	t.Helper()
	r, fake, prog := virtualRun(t, len(timings), int64(prompts), maxTokens, 0, capacity)
	sim := simfleet.New(timings, slots)
	trace, _ := playVirtual(r, fake, prog, sim, keep, prompts, time.Second, func(i int, j *job) *llmsim.Seq {
		return chatSeq("Be brief.", fmt.Sprintf("Question %d: explain topic number %d in a few words.", i, i*7919%1000), maxTokens, j)
	})
	return trace, sim.Now()
}

// playVirtual plays prompts answers (answer i as seqOf has it) on sim,
// keep in flight per endpoint, feeding r's estimator as the runner does
// (each prompt's tokens noted as infer counts them), and returns the
// progress line of every interval of simulated time and the answers
// that ended.
func playVirtual(r *runner, fake *fakeclock.Clock, prog *progress, sim *simfleet.Sim, keep, prompts int, interval time.Duration, seqOf func(i int, j *job) *llmsim.Seq) (trace []progressLine, ended int) {
	sent := 0
	var asked time.Duration
	sim.Keep(keep, func(e int, at time.Duration) (*llmsim.Seq, bool) {
		if sent == prompts {
			return nil, false
		}
		j := &job{}
		seq := seqOf(sent, j)
		j.fit.Prompt = seq.PromptTokens
		r.etaStarted(j, e, simEpoch.Add(at))
		sent++
		return seq, true
	}, func(st simfleet.Step) bool {
		now := simEpoch.Add(st.At)
		for _, q := range st.Finished {
			r.eta.Ended(q.Ref.(*job), now, true, q.Generated, q.End)
			r.c.ok.Add(1)
			r.c.tokenRate.Add(now, int64(q.Generated))
			ended++
		}
		if st.At-asked >= interval {
			asked = st.At
			fake.Set(now)
			if p, ok := parseProgress(prog.lines()[0]); ok {
				p.elapsed = st.At // exact, not the display's rounding
				trace = append(trace, p)
			}
		}
		return true
	})
	return trace, ended
}

// checkTrace: from 25% of the answers on, every ETA shown puts the end of
// the run within 15% of when it really ended, and none says 0 (or is
// missing) while answers are left.
func checkTrace(t *testing.T, trace []progressLine, wall time.Duration) {
	t.Helper()
	checked, worst := 0, 0.0
	for _, p := range trace {
		if p.done*4 < p.total || p.done >= p.total {
			continue
		}
		if !p.hasETA || p.eta <= 0 {
			t.Errorf("at %d/%d answers, %v in, %v before the end: no ETA, or 0: %s", p.done, p.total, p.elapsed, wall-p.elapsed, p.text)
			continue
		}
		checked++
		e := relErr(p.elapsed+p.eta, wall)
		worst = max(worst, e)
		if e > 0.15 {
			t.Errorf("at %d/%d answers, %v in: ETA %v puts the end at %v, it was %v (off by %.0f%% of the run)",
				p.done, p.total, p.elapsed, p.eta, p.elapsed+p.eta, wall, 100*e)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d progress lines from 25%% on", checked)
	}
	t.Logf("%d lines from 25%% on, worst end off by %.1f%% of the %v run", checked, 100*worst, wall)
}

// One endpoint of four is three times slower than the others: its
// answers take three times as long, so the run's end waits for its last
// ones. The ETA holds from 25% of the run on, and is never 0 while its
// answers are still being written.
func TestETAOneEndpointSlower(t *testing.T) {
	fast, slow := llmsim.DefaultTiming(), llmsim.DefaultTiming()
	slow.Slow = 3
	trace, wall := etaTrace(t, []llmsim.Timing{fast, fast, fast, slow}, llmsim.DefaultMaxRunning, llmsim.DefaultMaxRunning+2, 6000, 2048, nil)
	checkTrace(t, trace, wall)
}

// A server that queues: 64 requests in flight on a server that runs 4 at
// once, its capacity known as the pool knows it. The ETA holds from 25%
// on.
func TestETAQueuedFromAQuarter(t *testing.T) {
	trace, wall := etaTrace(t, []llmsim.Timing{llmsim.DefaultTiming()}, 4, 64, 600, 512, func(int) int { return 4 })
	checkTrace(t, trace, wall)
}
