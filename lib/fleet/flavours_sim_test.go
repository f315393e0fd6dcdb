package fleet

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/fakeclock"
	"tokenmill/internal/llmsim"
	"tokenmill/internal/simfleet"
	"tokenmill/internal/testbin"
)

// The pool's in-flight cap on virtual time, against each kind of server
// as the pool sees it: llmsim's scheduler model (internal/simfleet) with
// S slots behind one endpoint, brought up with what that kind of server
// says of itself (its capacity, or none), its metrics read every probe
// interval where it has them, requests sent as infer sends them (a free
// slot of the pool is refilled at once) and every answer observed as
// Complete observes it.

// simFlavour is what the pool learns of one kind of server.
type simFlavour struct {
	name string
	// capacity: the server reports its slots (SGLang's
	// max_running_requests, llama.cpp's total_slots).
	capacity bool
	// metrics: what its monitoring says of its load.
	metrics simMetrics
	// parallel: what discover assumes of it, whatever its slots (Ollama's
	// default parallelism).
	parallel int
}

type simMetrics int

const (
	noMetrics simMetrics = iota
	// countMetrics: running and waiting requests, as SGLang's and vLLM's
	// /metrics (and llama.cpp's with --metrics) count them.
	countMetrics
	// slotMetrics: which slots are busy, as llama.cpp's /slots says (its
	// /metrics answers 501 unless the server was started with --metrics).
	slotMetrics
)

var simFlavours = []simFlavour{
	{"sglang", true, countMetrics, 0},
	{"vllm", false, countMetrics, 0},
	{"llamacpp", true, slotMetrics, 0},
	{"ollama", false, noMetrics, ollamaDefaultParallel},
}

// latencyOnly is a server that says nothing of itself (a gateway, a vLLM
// without /metrics): the limit has latency alone to go on.
var latencyOnly = simFlavour{"latency", false, noMetrics, 0}

// simMode is how infer is told to fill the endpoint: its default, auto,
// or a fixed count.
type simMode struct {
	name  string
	fixed int
	auto  bool
}

func (m simMode) config() Config {
	return Config{FixedSlots: m.fixed, Adaptive: m.auto, QueueDepth: 2, ProbeInterval: simPollEvery}
}

var (
	modeDefault = simMode{name: "default"}
	modeAuto    = simMode{name: "auto", auto: true}
)

func modeFixed(n int) simMode { return simMode{name: fmt.Sprint(n), fixed: n} }

// simPollEvery is how often the pool reads a server's metrics: infer's
// default --probe-interval.
const simPollEvery = 2 * time.Second

// simWork is a run's prompts: answers of llmsim's long-tailed natural
// lengths (median ~600 tokens) cut at maxTokens, drawn from seed.
type simWork struct {
	answers, maxTokens int
	seed               uint64
}

// simSetup is one run.
type simSetup struct {
	flavour simFlavour
	plan    slotPlan
	mode    simMode
	work    simWork
	limiter LimiterConfig // the adaptive limit's bounds (zero: defaults)
	// rtt is a request's round trip beyond the server's steps: half of it
	// from the client to the server's queue, half from the step that
	// finished the answer back to the client, which then sends the next
	// (0: simRTT; negative: none).
	rtt time.Duration
	// poll is how often the pool reads the server's metrics, on the
	// model's time (0: simPollEvery); at llmsim's --time-scale S the pool's
	// probe interval is S times as long on the model's clock.
	poll time.Duration
}

// simRTT is the round trip of a request: the network, the server's
// parsing and templating, and the client's own handling of the answer.
const simRTT = 50 * time.Millisecond

// simEvent is what happens at a time between the model's steps: a
// request reaches the server, an answer reaches the client, or the
// client reads the server's metrics.
type simEvent struct {
	at   time.Duration
	seq  *llmsim.Seq // arrival or answer
	back bool        // the answer reaches the client
}

// pool is a pool of one endpoint set up as s says, brought up with what
// its flavour of server tells of itself.
func (s simSetup) pool(t testing.TB) (*Pool, *fakeclock.Clock, *logs) {
	cfg := s.mode.config()
	cfg.Limiter = s.limiter
	cfg.ProbeInterval = simPollEvery
	if s.poll > 0 {
		cfg.ProbeInterval = s.poll
	}
	p, fake, logs := testPool(t, 1, cfg)
	ep := p.eps[0]
	var info Info
	if s.flavour.capacity {
		info.Capacity, info.CapacitySource = s.plan.at(0), "the model"
	}
	if n := s.flavour.parallel; n > 0 {
		info.Parallel, info.ParallelSource = n, "Ollama's default"
	}
	p.mu.Lock()
	ep.polling = true // the test reads the metrics, on the model's time
	p.mu.Unlock()
	p.bringUp(ep, info, "the model")
	return p, fake, logs
}

// simulate runs s on the model and returns the limit over time, the
// output and the wall time of the whole run, the last answer included.
func simulate(t testing.TB, s simSetup) simRun {
	t.Helper()
	half := s.rtt / 2
	if s.rtt == 0 {
		half = simRTT / 2
	}
	half = max(half, 0)
	p, fake, logs := s.pool(t)
	ep := p.eps[0]
	sim := simfleet.Uniform(1, llmsim.DefaultTiming(), s.plan.at(0))
	type req struct{ sent time.Time }
	var run simRun
	var events []simEvent // in time order
	push := func(e simEvent) {
		i, _ := slices.BinarySearchFunc(events, e.at, func(a simEvent, at time.Duration) int {
			if a.at <= at {
				return -1
			}
			return 1
		})
		events = slices.Insert(events, i, e)
	}
	now := func() time.Duration { return fake.Now().Sub(epoch) }
	sent, done := 0, 0
	dispatch := func() {
		for sent < s.work.answers {
			got := p.TryAcquire(nil)
			if got == nil {
				return
			}
			// Requests go out one after another, as infer's senders send
			// them, never two at the same instant.
			fake.Advance(time.Microsecond)
			n := llmsim.NaturalLength(s.work.seed*0x9e3779b97f4a7c15+uint64(sent)*2654435761+1, 0)
			seq := &llmsim.Seq{PromptTokens: 60, Target: min(n, s.work.maxTokens), Ref: req{p.sent(got)}}
			push(simEvent{at: now() + half, seq: seq})
			sent++
		}
	}
	record := func() {
		p.mu.Lock()
		slots := ep.slots
		p.mu.Unlock()
		if l := len(run.limits); l == 0 || run.limits[l-1].limit != slots {
			run.limits = append(run.limits, limitAt{now(), slots, done})
		}
	}
	record()
	dispatch()
	nextPoll := time.Duration(0) // the pool reads them first as it brings the endpoint up
	for done < s.work.answers {
		step, busy := sim.Peek()
		switch {
		case len(events) > 0 && (!busy || events[0].at <= step):
			e := events[0]
			events = events[1:]
			sim.Advance(e.at)
			fake.Set(epoch.Add(max(e.at, now())))
			if !e.back {
				sim.Submit(0, e.seq)
				continue
			}
			p.observe(ep, e.seq.Ref.(req).sent, e.seq.Generated, nil)
			p.Release(ep)
			run.tokens += e.seq.Generated
			done++
			record()
			dispatch()
		case busy:
			st, _ := sim.NextFinished()
			fake.Set(epoch.Add(max(st.At, now())))
			sim.SetMaxRunning(0, s.plan.at(st.At))
			if s.flavour.metrics != noMetrics && st.At >= nextPoll {
				p.mu.Lock()
				p.loadLocked(ep, s.flavour.reading(sim, s.plan.at(st.At), p.clk.Now(), ep.inflight))
				p.mu.Unlock()
				p.mu.Lock()
				nextPoll = st.At + p.pollEveryLocked(ep)
				p.mu.Unlock()
				record()
				dispatch()
			}
			for _, f := range st.Finished {
				push(simEvent{at: st.At + half, seq: f, back: true})
			}
		default:
			t.Fatalf("%d of %d answers came back, and nothing is under way", done, s.work.answers)
		}
	}
	run.wall, run.notes = now(), logs.text()
	return run
}

// reading is what the flavour's monitoring says of the model now, read
// as the pool reads it (loadSource).
func (f simFlavour) reading(sim *simfleet.Sim, slots int, now time.Time, inflight int) serverLoad {
	var load serverLoad
	if f.metrics == slotMetrics {
		body := "["
		for i := range slots {
			if i > 0 {
				body += ","
			}
			body += fmt.Sprintf(`{"id":%d,"is_processing":%v}`, i, i < sim.Running(0))
		}
		load, _ = slotsSource{}.read([]byte(body+"]"), inflight)
	} else {
		load = serverLoad{running: sim.Running(0), waiting: sim.Waiting(0)}
	}
	load.at = now
	return load
}

// wallTimes runs every mode on the setup for each seed and returns each
// mode's wall times, in seed order.
func wallTimes(t testing.TB, s simSetup, modes []simMode, seeds []uint64) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, seed := range seeds {
		for _, m := range modes {
			s.mode, s.work.seed = m, seed
			out[m.name] = append(out[m.name], simulate(t, s).wall)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// fixedLevels are the fixed in-flight counts a run on s slots is compared
// with: from half the slots to four times as many.
func fixedLevels(s int) []simMode {
	var out []simMode
	for _, n := range []int{s / 2, s, s + 2, s + s/8, s + s/4, s + s/2, 2 * s, 4 * s} {
		if n > 0 && !slices.ContainsFunc(out, func(m simMode) bool { return m.fixed == n }) {
			out = append(out, modeFixed(n))
		}
	}
	slices.SortFunc(out, func(a, b simMode) int { return a.fixed - b.fixed })
	return out
}

// simWorkFor is the run a test measures on s slots: 100 answers a slot,
// a short run (the production job is 1,700 a slot), up to 512 tokens each.
func simWorkFor(s int) simWork { return simWork{answers: 100 * s, maxTokens: 512} }

// The default and auto keep every kind of server's slots full: at 4, 32
// and 128 slots, each kind's run ends within 3% of the time the best of
// the fixed levels takes (here the slots with their spare and twice the
// slots, which the long table shows are as good as any), on one seed.
// TestInFlightTable compares them with every fixed level, on three.
func TestInFlightPerFlavour(t *testing.T) {
	if testing.Short() {
		t.Skip("about 5 s")
	}
	for _, slots := range []int{4, 32, 128} {
		for _, fl := range simFlavours {
			t.Run(fmt.Sprintf("%s/%d", fl.name, slots), func(t *testing.T) {
				t.Parallel()
				s := simSetup{flavour: fl, plan: slotPlan{{Slots: slots}}, work: simWorkFor(slots)}
				s.work.seed = 1
				best := time.Duration(1 << 62)
				for _, n := range []int{slots + LimiterConfig{}.withDefaults().spare(slots), 2 * slots} {
					s.mode = modeFixed(n)
					best = min(best, simulate(t, s).wall)
				}
				modes := []simMode{modeDefault, modeAuto}
				if !fl.capacity {
					modes = modes[:1] // auto is the default where no capacity is reported
				}
				for _, m := range modes {
					s.mode = m
					run := simulate(t, s)
					if r := float64(run.wall) / float64(best); r > 1.03 {
						t.Errorf("%s: %v, %.3f× the best fixed level's %v; limits:%s\n%s", m.name, run.wall, r, best, run, run.notes)
					}
				}
			})
		}
	}
}

var inflightCells = flag.String("inflight-json", "", "TestInFlightTable: write each cell (slots, kind of server, mode, median wall seconds) to this JSONL file, for the bench harness (internal/benchsuite) to render")

// InFlightCell is one cell of TestInFlightTable: a mode's median wall
// time on a kind of server at a number of slots.
type InFlightCell struct {
	Slots     int     `json:"slots"`
	Kind      string  `json:"kind"`
	Mode      string  `json:"mode"`  // default, auto, or the fixed count
	Fixed     int     `json:"fixed"` // the fixed count; 0 for default and auto
	WallS     float64 `json:"wall_s"`
	Answers   int     `json:"answers"`
	MaxTokens int     `json:"max_tokens"`
	Runs      int     `json:"runs"`
}

// The in-flight count on every kind of server at 4, 32 and 128 slots:
// infer's default and auto against every fixed level, each the median of
// three runs (three seeds of answer lengths) on virtual time, default and
// auto within 3% of the best fixed level. With -inflight-json FILE it
// writes every cell to FILE (`benchsuite run --section kinds` renders
// them in BENCHMARKS.md).
func TestInFlightTable(t *testing.T) {
	testbin.Long(t, "72 runs on virtual time per slot count, about a minute")
	seeds := []uint64{1, 2, 3}
	var cells []InFlightCell
	for _, slots := range []int{4, 32, 128} {
		modes := append([]simMode{modeDefault, modeAuto}, fixedLevels(slots)...)
		w := simWorkFor(slots)
		for _, fl := range simFlavours {
			s := simSetup{flavour: fl, plan: slotPlan{{Slots: slots}}, work: w}
			walls := wallTimes(t, s, modes, seeds)
			best := time.Duration(1 << 62)
			for _, m := range modes[2:] {
				best = min(best, median(walls[m.name]))
			}
			for _, m := range modes {
				wall := median(walls[m.name])
				if r := float64(wall) / float64(best); m.fixed == 0 && r > 1.03 {
					t.Errorf("%s, %d slots: %s %.3f× the best fixed level", fl.name, slots, m.name, r)
				}
				cells = append(cells, InFlightCell{Slots: slots, Kind: fl.name, Mode: m.name, Fixed: m.fixed, WallS: wall.Seconds(),
					Answers: w.answers, MaxTokens: w.maxTokens, Runs: len(seeds)})
			}
			t.Logf("%s, %d slots: default %v, auto %v, best fixed %v", fl.name, slots,
				median(walls[modeDefault.name]).Round(time.Second), median(walls[modeAuto.name]).Round(time.Second), best.Round(time.Second))
		}
	}
	if *inflightCells != "" {
		var b bytes.Buffer
		for _, c := range cells {
			line, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(append(line, '\n'))
		}
		if err := os.WriteFile(*inflightCells, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
