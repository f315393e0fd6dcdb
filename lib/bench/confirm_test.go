package bench

import (
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"

	"github.com/segmentio/encoding/json"
)

// historyServer is a server whose speed depends on what it ran before, as
// the real Ollama's did on this machine: fresh, 2 at once gave 2,599
// tok/s; once a level had 4 in flight (every slot holding an answer in
// its cache), every level ran at about half that, for good.
type historyServer struct {
	fresh, used map[int]float64
	dirty       bool
	measured    []int
}

func (s *historyServer) measure(n int) (Level, bool) {
	s.measured = append(s.measured, n)
	rate := s.fresh[n]
	if s.dirty {
		rate = s.used[n]
	}
	if n >= 4 {
		s.dirty = true
	}
	return Level{Concurrency: n, InFlight: n, TokPerSec: rate, Answers: 100, Halves: []float64{rate, rate}}, true
}

// ladder measures levels in order, as the bench's first pass does.
func (s *historyServer) ladder(levels ...int) []Level {
	var out []Level
	for _, n := range levels {
		lv, _ := s.measure(n)
		out = append(out, lv)
	}
	return out
}

// The knee is measured again once the ladder is done; on a server that
// changed during it, so is every other level, and the knee and the
// forecast come from the second pass: the rates the run will find. On
// one that did not, only the knee is measured again; nothing is when the
// knee was the last level measured, or when the bench is interrupted.
func TestConfirmAfterTheLadder(t *testing.T) {
	srv := &historyServer{
		fresh: map[int]float64{1: 2263, 2: 2599, 4: 1153, 8: 1272},
		used:  map[int]float64{1: 1000, 2: 1115, 4: 1400, 8: 1300},
	}
	first := srv.ladder(1, 2, 4, 8)
	if k, _ := knee(first); first[k].Concurrency != 2 {
		t.Fatalf("first pass knee %d, want 2", first[k].Concurrency)
	}
	got, drift := confirm(first, srv.measure)
	if want := []int{1, 2, 4, 8, 2, 1, 4, 8}; !equalInts(srv.measured, want) {
		t.Errorf("measured %v, want %v (the ladder, the knee again, then the others)", srv.measured, want)
	}
	for i, lv := range got {
		if !lv.Remeasured || lv.FirstTokPerSec != first[i].TokPerSec || lv.TokPerSec != srv.used[lv.Concurrency] {
			t.Errorf("level %d: %+v, want measured again at %.0f (first %.0f)", lv.Concurrency, lv, srv.used[lv.Concurrency], first[i].TokPerSec)
		}
	}
	hasAll(t, "drift", drift, "2 per endpoint gave 2,599 tok/s before the levels above it and 1,115 after them", "every level was measured again")

	// The forecast is the second pass's: the knee moved to 4, and the run
	// is forecast at the rate the server gives now.
	rep := &Report{Levels: got, Drift: drift, AnswerTokens: 32}
	c := &Bench{DatasetSize: 200, MeanAnswerTokens: 32}
	rep.finish(c, &benchRun{cfg: c, maxRunning: []int{0}})
	if rep.Recommended != 4 || rep.Forecast == nil || rep.Forecast.TokPerSec != 1400 {
		t.Fatalf("report %+v forecast %+v: want 4 recommended, forecast at 1,400 tok/s", rep, rep.Forecast)
	}
	var b strings.Builder
	if err := rep.write(&b, false); err != nil {
		t.Fatal(err)
	}
	hasAll(t, "table", b.String(), "measured again after the ladder (first 2,599 tok/s)", "drift: the servers changed during the ladder", "recommended: --concurrency 4")

	// A server that stays as it was: the knee alone is measured again,
	// its latest figure kept, and no drift.
	steady := &historyServer{fresh: srv.fresh, used: srv.fresh}
	first = steady.ladder(1, 2, 4, 8)
	got, drift = confirm(first, steady.measure)
	if drift != "" || !equalInts(steady.measured, []int{1, 2, 4, 8, 2}) || !got[1].Remeasured || got[0].Remeasured {
		t.Errorf("steady server: measured %v, drift %q, levels %+v", steady.measured, drift, got)
	}

	// The knee measured last: nothing ran after it.
	climbing := &historyServer{fresh: map[int]float64{1: 100, 2: 200, 4: 400}, used: map[int]float64{1: 50, 2: 50, 4: 50}}
	first = climbing.ladder(1, 2, 4)
	if got, drift = confirm(first, climbing.measure); drift != "" || len(climbing.measured) != 3 || got[2].Remeasured {
		t.Errorf("knee last: measured %v, drift %q", climbing.measured, drift)
	}

	// Interrupted while measuring again: the first pass stands.
	srv = &historyServer{fresh: srv.fresh, used: srv.used}
	first = srv.ladder(1, 2, 4, 8)
	calls := 0
	got, drift = confirm(first, func(n int) (Level, bool) {
		calls++
		if calls > 1 {
			return Level{}, false
		}
		return srv.measure(n)
	})
	if drift != "" || got[1].Remeasured || got[1].TokPerSec != 2599 {
		t.Errorf("interrupted: drift %q, levels %+v", drift, got)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Through the binary, on a simulated Ollama that loses slots while the
// ladder climbs (2 slots, then 1 from the fourth level's warm-up on): the
// knee, 2, measured again gives about half, every level is measured again,
// and the recommendation and the forecast are the one-slot server's.
func TestBenchRemeasuresAChangedServer(t *testing.T) {
	if testing.Short() {
		t.Skip("eight levels of the bench on simulated time, about 6 s")
	}
	// Levels of 5 s warm-up and 30 s measured: 1, 2 and 4 take the first
	// 105 s of the server's time (with one level measured again if its
	// halves disagreed); the slot lost at 110 s leaves 8, the knee measured
	// again and the second pass to the one-slot server.
	endpoints := simBinary(t, 1, "--flavor", "ollama", "--max-running", "2", "--slots-schedule", "0s:2,110s:1", "--time-scale", "50")
	r := testbin.Run(t, "", nil, nil, "infer", "bench", "--json", "-e", endpoints, "--concurrency", "1,2,4,8",
		"--warmup", "5s", "--duration", "30s", "--answer-tokens", "64", "--prompt-tokens", "40", "--time-scale", "50",
		"--dataset-size", "1000", "--mean-answer-tokens", "64")
	if r.Code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	var rep Report
	if err := json.Unmarshal(r.Stdout, &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	if rep.Drift == "" || rep.Forecast == nil {
		t.Fatalf("no drift said, or no forecast: %+v\n%s", rep, r.Stderr)
	}
	two := levelAt(t, rep, 2)
	if !two.Remeasured || !(two.TokPerSec < 0.75*two.FirstTokPerSec) {
		t.Errorf("level 2 measured again at %.0f tok/s, first %.0f: want about half\n%s", two.TokPerSec, two.FirstTokPerSec, r.Stderr)
	}
	for _, lv := range rep.Levels {
		if !lv.Remeasured {
			t.Errorf("level %d not measured again\n%s", lv.Concurrency, r.Stderr)
		}
	}
	// One slot: every level gives the same, so the knee is the lowest.
	if rep.Recommended != 1 {
		t.Errorf("recommended %d, want 1 (one slot left)\n%s", rep.Recommended, r.Stderr)
	}
	if f := rep.Forecast; f.TokPerSec != levelAt(t, rep, 1).TokPerSec {
		t.Errorf("forecast at %.0f tok/s, not the second measurement of level 1", f.TokPerSec)
	}
	hasAll(t, "stderr", r.Stderr, "level 2 per endpoint again, as the ladder left the servers", "the servers changed during the ladder")
}
