package benchsuite

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// regenRun is a run's figures by name, for canned rows.
type regenRun struct {
	Name                                                                           string
	Requests, LaterTurns, PromptTokens, CachedTokens, PrefillTokens, HistoryTokens float64
	HistoryCached, GeneratedTokens, WallS, SimWallS, CacheHitPct, HistoryHitPct    float64
}

// result is the run's row, its figures named as regenStats names them.
func (r regenRun) result() *Result {
	return &Result{Group: "regen", Name: r.Name, OutRecords: -1, Metrics: map[string]float64{"requests": r.Requests, "later_turns": r.LaterTurns,
		"prompt_tokens": r.PromptTokens, "cached_tokens": r.CachedTokens, "prefill_tokens": r.PrefillTokens, "history_tokens": r.HistoryTokens,
		"history_cached": r.HistoryCached, "generated_tokens": r.GeneratedTokens, "wall_s": r.WallS, "sim_wall_s": r.SimWallS,
		"cache_hit_pct": r.CacheHitPct, "history_hit_pct": r.HistoryHitPct}}
}

// Two endpoints' worth of work chosen so that every figure is round: each
// endpoint decodes 100 s at 1,000 tok/s, and prefilling every prompt token
// at 250 µs would take it another 100 s.
func TestRenderFloorsAndBounds(t *testing.T) {
	a := regenRun{Name: "(a)", Requests: 10, PromptTokens: 800_000, CachedTokens: 720_000, PrefillTokens: 80_000, HistoryHitPct: 95, GeneratedTokens: 200_000, SimWallS: 120}
	b := regenRun{Name: "(b)", Requests: 10, PromptTokens: 800_000, CachedTokens: 80_000, PrefillTokens: 720_000, HistoryHitPct: 10, GeneratedTokens: 200_000, SimWallS: 220}
	cc := regenRun{Name: "(c)", Requests: 10, PromptTokens: 800_000, CachedTokens: 720_000, PrefillTokens: 80_000, HistoryHitPct: 95, GeneratedTokens: 200_000, SimWallS: 132}
	var out bytes.Buffer
	renderRegen(&out, []*Result{a.result(), b.result(), cc.result()}, 250, 1000, 2)
	got := out.String()
	for _, want := range []string{
		// floors: 100 s of answers plus 10 s (a, c) or 90 s (b) of prefill
		"| (a) | 120 s | 1.00× | 10 | 800,000 | 720,000 (0.0%) | 80,000 | 95.0% | 110 s |",
		"| (b) | 220 s | 1.83× | 10 | 800,000 | 80,000 (0.0%) | 720,000 | 10.0% | 190 s |",
		"| (a): ≥ 90% of history tokens served from cache | 95.0% | 100% | yes |",
		// any client at most: each wall time over the least floor, 110 s
		"| (a) ≥ 1.3× faster than (b) | 1.83× | 2.00× | yes |",
		"| (a) ≥ 1.3× faster than (c) | 1.10× | 1.20× | **no** |",
		"Without a prefix cache prefill is 50.0% of an endpoint's busy time, so a client whose cache served every prompt token could be at most 2.00× faster",
		"No client can take less than the smallest floor, 110 s ((a))",
		"- (b) computed 640,000 prefill tokens more than (a): at 250 µs a token over 2 endpoints, 80 s of each endpoint's time; its wall time differs by 100 s.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// The line on prefill's share: the bound a full cache sets, and none
// without answers to set prefill against.
func TestNoCacheGain(t *testing.T) {
	for _, tc := range []struct {
		prefillUS, generated float64
		want                 string
	}{
		{250, 200_000, "prefill is 50.0% of an endpoint's busy time, so a client whose cache served every prompt token could be at most 2.00× faster"},
		{40, 200_000, "prefill is 13.8% of an endpoint's busy time, so a client whose cache served every prompt token could be at most 1.16× faster"},
		{250, 0, "prefill is 0.0% of an endpoint's busy time, so a client whose cache served every prompt token could be at most 0.00× faster"},
	} {
		var out bytes.Buffer
		renderRegen(&out, []*Result{regenRun{Name: "(a)", GeneratedTokens: tc.generated, PromptTokens: 800_000}.result()}, tc.prefillUS, 1000, 2)
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%+v: output lacks %q:\n%s", tc, tc.want, out.String())
		}
	}
}

// TestRegenStats reads a request log as llmsim writes it: a first turn, a
// later turn whose history the cache served in part, and failed requests,
// which add nothing.
func TestRegenStats(t *testing.T) {
	log := filepath.Join(t.TempDir(), "requests.jsonl")
	lines := `{"status":200,"prompt_tokens":20,"cached_tokens":0,"body":{"messages":[{"role":"user","content":"12345678"}]}}
{"status":200,"prompt_tokens":40,"cached_tokens":10,"body":{"messages":[{"role":"user","content":"12345678"},{"role":"assistant","content":"abcdefghabcdefgh"},{"role":"user","content":"again"}]}}
{"status":503,"prompt_tokens":40,"cached_tokens":0,"body":{"messages":[{"role":"user","content":"x"}]}}
{"status":200,"prompt_tokens":40,"cached_tokens":0,"outcome":"abort","body":{"messages":[{"role":"user","content":"x"}]}}
`
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := regenStats(log, "(a)", 6.5, 10, 999)
	if err != nil {
		t.Fatal(err)
	}
	// History of the later turn: (4+2) + (4+4) tokens, 10 of them cached.
	want := regenRun{Name: "(a)", Requests: 2, LaterTurns: 1, PromptTokens: 60, CachedTokens: 10, PrefillTokens: 50,
		HistoryTokens: 14, HistoryCached: 10, GeneratedTokens: 999, WallS: 6.5, SimWallS: 65, CacheHitPct: 100 * 10.0 / 60, HistoryHitPct: 100 * 10.0 / 14}
	if w := want.result(); r.Group != w.Group || r.Name != w.Name || !reflect.DeepEqual(r.Metrics, w.Metrics) {
		t.Fatalf("got  %+v\nwant %+v", r, w)
	}
	if err := os.WriteFile(log, []byte("{\"status\":200}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := regenStats(log, "(a)", 1, 1, 0); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("a malformed log line: %v, want an error naming line 2", err)
	}
}

// TestPromValue reads figures of a Prometheus text page as the fleet
// section polls them: by name alone whatever their labels, or by name and
// labels; a name that only starts another's is not it.
func TestPromValue(t *testing.T) {
	page := []byte(`# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen3.6-27B"} 12.0
tokenmill_infer_tokens_total{kind="prompt"} 400
tokenmill_infer_tokens_total{kind="completion"} 1.5e+06
tokenmill_infer_retries_total_other 9
tokenmill_infer_retries_total 3
`)
	for metric, want := range map[string]float64{
		"sglang:num_running_reqs": 12, `tokenmill_infer_tokens_total{kind="completion"}`: 1.5e6, "tokenmill_infer_retries_total": 3,
		"sglang:num_queue_reqs": 0, "tokenmill_infer_retries": 0,
	} {
		if got := promValue(page, metric); got != want {
			t.Errorf("%s = %v, want %v", metric, got, want)
		}
	}
}
