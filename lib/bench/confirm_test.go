package bench

import (
	"strings"
	"testing"
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
	got, drift, unsettled := confirm(first, srv.measure)
	if want := []int{1, 2, 4, 8, 2, 1, 4, 8, 4}; !equalInts(srv.measured, want) {
		t.Errorf("measured %v, want %v (the ladder, the knee again, the others, then the new knee a third time)", srv.measured, want)
	}
	if unsettled != "" || got[2].PrevTokPerSec != 1400 {
		t.Errorf("settled server said unsettled %q, or the new knee's second figure not kept: %+v", unsettled, got[2])
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
	rep.finish(&benchRun{cfg: planConfig(200, 32), maxRunning: []int{0}})
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
	got, drift, unsettled = confirm(first, steady.measure)
	if drift != "" || unsettled != "" || !equalInts(steady.measured, []int{1, 2, 4, 8, 2}) || !got[1].Remeasured || got[0].Remeasured {
		t.Errorf("steady server: measured %v, drift %q, levels %+v", steady.measured, drift, got)
	}

	// The knee measured last: nothing ran after it.
	climbing := &historyServer{fresh: map[int]float64{1: 100, 2: 200, 4: 400}, used: map[int]float64{1: 50, 2: 50, 4: 50}}
	first = climbing.ladder(1, 2, 4)
	if got, drift, _ = confirm(first, climbing.measure); drift != "" || len(climbing.measured) != 3 || got[2].Remeasured {
		t.Errorf("knee last: measured %v, drift %q", climbing.measured, drift)
	}

	// Interrupted while measuring again: the first pass stands.
	srv = &historyServer{fresh: srv.fresh, used: srv.used}
	first = srv.ladder(1, 2, 4, 8)
	calls := 0
	got, drift, _ = confirm(first, func(n int) (Level, bool) {
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

// A server still slowing after the second pass: each measurement of the
// knee disagrees with the one before, the report says it could not
// measure the servers settled, and the forecast's range spans the last two
// rates.
func TestConfirmUnsettled(t *testing.T) {
	rates := map[int][]float64{1: {2263, 1000}, 2: {2599, 1800, 1600, 1400, 1200}, 4: {1153, 1100}}
	seen := map[int]int{}
	measure := func(n int) (Level, bool) {
		r := rates[n][min(seen[n], len(rates[n])-1)]
		seen[n]++
		return Level{Concurrency: n, InFlight: n, TokPerSec: r, Answers: 100, Halves: []float64{r, r}}, true
	}
	var first []Level
	for _, n := range []int{1, 2, 4} {
		lv, _ := measure(n)
		first = append(first, lv)
	}
	got, drift, unsettled := confirm(first, measure)
	if drift == "" || got[1].TokPerSec != 1200 || got[1].PrevTokPerSec != 1400 || got[1].FirstTokPerSec != 2599 {
		t.Fatalf("drift %q, level 2 %+v", drift, got[1])
	}
	hasAll(t, "unsettled", unsettled, "measured 3 more times after the second pass, the knee kept changing (last 2 per endpoint: 1,200 tok/s, after 1,400; 2,599 in the ladder)")
	rep := &Report{Levels: got, Drift: drift, Unsettled: unsettled, AnswerTokens: 32}
	rep.finish(&benchRun{cfg: planConfig(200, 32), maxRunning: []int{0}})
	f := rep.Forecast
	if f == nil || f.TokPerSec != 1200 || !(f.LowSeconds <= 200*32/1400.0+1e-9 && f.HighSeconds >= 200*32/1200.0-1e-9) {
		t.Fatalf("forecast %+v: want 1,200 tok/s, its range spanning 1,400's %.2f s to 1,200's %.2f s", f, 200*32/1400.0, 200*32/1200.0)
	}
	var b strings.Builder
	if err := rep.write(&b, false); err != nil {
		t.Fatal(err)
	}
	hasAll(t, "table", b.String(), "could not measure the servers settled")
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
