package benchsuite

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"tokenmill/internal/testbin"
)

// A report's every section rendered from canned rows: each section's
// golden file pins its text, and a row taken away must change it.

// fig is a figure between 1 and 2 drawn from a name, so that canned rows
// differ without a table of numbers.
func fig(name string) float64 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return 1 + float64(h.Sum32()%1000)/1000
}

// streamRow is a row of a stream table: mb MB and recs records in, each
// run's wall time a few percent apart.
func streamRow(group, name string, ours bool, mb float64, recs int64, runs int) *Result {
	f := fig(group + name)
	r := &Result{Group: group, Name: name, Ours: ours, Command: strings.Fields(name)[0] + " data/in.jsonl", Bytes: int64(mb * 1e6), Records: recs,
		OutRecords: recs - int64(f*100), Load1: f, Metrics: map[string]float64{"others_cores": f - 1}, RSSFloorKB: 12 << 10}
	for i := range runs {
		wall := f * (1 + 0.02*float64(i)) * mb / 400
		r.Runs = append(r.Runs, Run{Wall: time.Duration(wall * float64(time.Second)), User: time.Duration(0.9 * wall * float64(time.Second)),
			Sys: time.Duration(0.05 * wall * float64(time.Second)), MaxRSSKB: int64(10+f*30) << 10})
	}
	return r
}

// sizedRow is a row of a growth table at a size, one run.
func sizedRow(group, name, size string, k float64) *Result {
	r := streamRow(group, name, false, 16*k, int64(10000*k), 1)
	r.Size, r.Runs[0].MaxRSSKB = size, int64(fig(name+size)*20*(1+k/100))<<10
	return r
}

func metricsRow(group, name string, ours bool, m map[string]float64) *Result {
	return &Result{Group: group, Name: name, Ours: ours, Command: "go test -bench " + name, OutRecords: -1, Load1: 2, Metrics: m}
}

func cannedReportResults(t *testing.T) []*Result {
	t.Helper()
	var rs []*Result
	add := func(r ...*Result) { rs = append(rs, r...) }
	stream := func(group string, mb float64, recs int64, rows ...string) {
		for _, name := range rows {
			ours := strings.HasPrefix(name, "*")
			add(streamRow(group, strings.TrimPrefix(name, "*"), ours, mb, recs, 3))
		}
	}
	stream("extract", 1198, 660000, "*extract, 1 core", "jq, 1 core", "*extract --workers 1", "*extract --workers 2")
	stream("extract-parquet", 1198, 660000, "*JSONL, 1 core", "*Parquet, 1 core", "*JSONL, 2 workers", "*Parquet, 2 workers", pagesRow, "DuckDB, 1 thread")
	for _, k := range []int{1, 4, 16} {
		stream("extract-scale", 75*float64(k), 41250*int64(k), fmt.Sprintf("*JSONL, %dx", k), fmt.Sprintf("*Parquet, %dx", k))
	}
	stream("dedup", 373, 660000, "*dedup", "dedup --workers 1", "*dedup --exact", "awk", "sort -u", "jq + sort")
	gawk := unavailable("dedup", "gawk", missing("gawk")+"; awk here is /usr/bin/mawk")
	gawk.Load1 = 1.5
	add(gawk)
	stream("dedup", 56, 100000, "*dedup, first 100000", "jq -s unique_by, first 100000")
	stream("dedup-exact", 2800, 5000000, "*dedup --exact, 5M", "sort -u by prompt, 5M")
	for i, b := range []string{"J 0.9-1", "J 0.8-0.9", "J 0.7-0.8", "J 0.6-0.7", "J 0.3-0.6", "J 0-0.3"} {
		add(metricsRow("neardup-quality", b, false, map[string]float64{"pairs": 1000, "dropped": float64(1000 - 190*i), "own_base": float64(1000 - 190*i),
			"drop_rate": float64(1000-190*i) / 1000, "rate_substitute": 1 - 0.19*float64(i), "rate_insert": 1 - 0.2*float64(i), "rate_reorder": 1 - 0.18*float64(i)}))
	}
	add(metricsRow("neardup-quality", "J below 0.6", false, map[string]float64{"pairs": 2000, "dropped": 3, "own_base": 3, "drop_rate": 0.0015}),
		metricsRow("neardup-quality", "bases", false, map[string]float64{"pairs": 6000, "dropped": 0, "drop_rate": 0, "precision": 0.998, "drops": 3100}),
		metricsRow("neardup-real", "alpaca_en_demo.json", false, map[string]float64{"prompts": 999, "exact": 14, "near": 3, "kept": 982}),
		metricsRow("neardup-real", "glaive_toolcall_en_demo.json", false, map[string]float64{"prompts": 300, "exact": 0, "near": 1, "kept": 299}))
	stream("neardup", 23, 41250, "*dedup --near, 1 core", "*dedup (exact), 1 core", "*dedup --near, 2 workers", pythonRow)
	sig := metricsRow("neardup", signLSHRow, true, map[string]float64{"mb_per_cpu_s": 65.38, "runs": 5})
	sig.Note = "MB of prompt text (first human turns of the corpus), not of JSONL"
	add(sig)
	for i, size := range []string{"1× (41,250)", "4× (165,000)", "16× (660,000)"} {
		k := []float64{1, 4, 16}[i]
		add(sizedRow("neardup-growth", "dedup --near", size, k), sizedRow("neardup-growth", "dedup (exact)", size, k))
	}
	stream("shard", 373, 660000, "*shard", "*shard --by round-robin", "split -n l/8", "awk round-robin", "awk by id", "shard --workers 1")
	stream("compose", 380, 660000, "*compose", "compose --workers 1", "jq + shuf -n")
	stream("merge", 1098, 676454, "*merge", "*merge --sort", "merge --workers 1")
	stream("merge", 170, 102500, "*merge, first 100000", "jq -s group_by, first 100000")
	stream("merge", 1098, 676454, "sort + awk join")
	stream("stats", 1043, 660000, "*stats", "*stats --json", "stats --workers 1")
	stream("stats", 160, 100000, "*stats, first 100000")
	stream("stats", 1043, 660000, "jq + sort + awk")
	stream("stats", 160, 100000, "jq -s, first 100000")
	stream("filter", 1000, 480000, "*filter", "filter --workers 1", "python3 filter_gopher.py")
	stream("filter-lang", 50, 24000, "*filter --checks default,lang", "filter (default checks)")
	stream("client", 0, 100000, "*infer")
	stream("client", 0, 20000, "OpenAI Node SDK 6.49.0")
	stream("client", 0, 4000, "xargs -P 64 curl")
	for i, mode := range costModes {
		add(metricsRow("cost", mode, true, map[string]float64{"cpu-µs/req": 30 + float64(i), "allocs/req": 80 + float64(i), "B/req": 9000 + 100*float64(i), "runs": 5}))
	}
	add(metricsRow("llmsim", "llmsim --instant, 1 endpoint", true, map[string]float64{"rps": 84431, "runs": 5}))
	for i, p := range []string{"least-outstanding", "round-robin"} {
		r := streamRow("fleet", p, false, 0, 8000, 3)
		r.Command = "llmsim --listen 127.0.0.1:0 &\ninfer --policy " + p + " data/fleet-prompts.jsonl"
		r.Metrics = map[string]float64{"tok_s": 8362 - 900*float64(i), "ideal_tok_s": 8454, "ideal_pct": 99 - 9*float64(i), "ideal_prefill_pct": 99.9 - 9*float64(i),
			"util_pct": 99.8 - 5*float64(i), "whole_pct": 83.8 - 7*float64(i), "down_sim_s": 100, "failed": 0, "retries": 51 + float64(i)}
		add(r)
	}
	for mode, m := range map[string]map[string]float64{
		"without":       {"client-cpu-µs/req": 70, "answers/s": 7000, "gen-jsonl-KB/1k": 1600, "rows-jsonl-KB/1k": 0.5},
		"with":          {"client-cpu-µs/req": 77, "answers/s": 6000, "gen-jsonl-KB/1k": 3600, "rows-jsonl-KB/1k": 2300, "rows-parquet-KB/1k": 450},
		"fleet-without": {"client-cpu-µs/req": 90, "answers/s": 160},
		"fleet-with":    {"client-cpu-µs/req": 99, "answers/s": 156},
	} {
		add(metricsRow("tokenids", mode+" --token-ids", strings.HasSuffix(mode, "with"), m))
	}
	for _, c := range []struct {
		key    string
		levels []int
	}{{"4", []int{2, 4, 8, 64}}, {"48", []int{32, 48, 64}}, {"schedule", []int{16, 48, 64}}} {
		add(streamRow("servers-"+c.key, "infer (adapted)", true, 0, 1100, 3))
		for _, l := range c.levels {
			add(streamRow("servers-"+c.key, fmt.Sprintf("infer --concurrency %d", l), false, 0, 1100, 3))
		}
	}
	for _, slots := range kindsSlots {
		for _, mode := range []string{"default", "auto", "--concurrency 4", "--concurrency 8", "--concurrency 16"} {
			m := map[string]float64{"answers": float64(100 * slots), "max_tokens": 512, "runs": 3}
			for _, kind := range kindsOrder {
				m[kind] = 1500 * fig(fmt.Sprint(slots, mode, kind))
			}
			add(metricsRow(kindsGroup(slots), mode, !strings.HasPrefix(mode, "--"), m))
		}
	}
	stream("ollama", 0, 200, "*infer (defaults)", "infer --concurrency 4", "xargs -P 4 curl", "OpenAI Node SDK, 4 at once", "infer --concurrency 2 (infer bench's recommendation)")
	bench := streamRow(ollamaBenchGroup, ollamaBenchRow, true, 0, 0, 1)
	bench.Records, bench.OutRecords = 0, -1
	bench.Metrics = map[string]float64{"levels": 4, "knee": 2, "recommended": 2, "held": 1, "forecast_s": 4.4, "forecast_low_s": 4, "forecast_high_s": 5}
	bench.Note = "measured 1: 300 tok/s, 2: 520 tok/s; knee and recommendation 2; forecast 4.4 s (4.0 s-5.0 s) for 200 answers"
	add(bench)
	for i, size := range []string{"10k", "100k", "1M"} {
		k := []float64{1, 10, 100}[i]
		for _, tool := range []string{"extract", "dedup", "dedup --exact", "shard", "merge", "stats", "infer", "awk '!seen[$0]++'"} {
			add(sizedRow("growth", tool, size, k))
		}
	}
	for i, size := range []string{"65k", "650k", "6.5M"} {
		r := sizedRow("infer-memory", "infer", size, []float64{1, 10, 100}[i])
		r.Ours, r.Records = true, []int64{65000, 650000, 6500000}[i]
		add(r)
	}
	add(metricsRow("infer-memory-ledger", "tables", true, map[string]float64{"B/id": 16.25, "heap-B/id": 0.01, "ns/id": 313, "runs": 5}),
		metricsRow("infer-memory-ledger", "map", false, map[string]float64{"B/id": 55.8, "heap-B/id": 55.8, "ns/id": 705, "runs": 5}))
	for i, size := range []string{"1× (62.5k)", "4× (250k)", "16× (1M)"} {
		k := []float64{1, 4, 16}[i]
		for _, tool := range []string{"dedup", "dedup --exact", "shard", "merge", "stats", "filter"} {
			add(sizedRow("scale", tool, size, k))
		}
	}
	return rs
}

// cannedRegen are the regenerate section's three runs.
func cannedRegen() []regenRun {
	var runs []regenRun
	for i, name := range []string{"(a) infer --regenerate", "(b) infer --regenerate --no-affinity", "(c) specforge_regen.py"} {
		f := []float64{1, 1.6, 1.1}[i]
		runs = append(runs, regenRun{Name: name, Requests: 12000, LaterTurns: 8000, PromptTokens: 30_000_000, CachedTokens: math.Trunc(27_000_000 / f),
			PrefillTokens: 30_000_000 - math.Trunc(27_000_000/f), HistoryTokens: 24_000_000, HistoryCached: math.Trunc(23_000_000 / f), GeneratedTokens: 6_000_000,
			WallS: 100 * f, SimWallS: 1000 * f, CacheHitPct: 90 / f, HistoryHitPct: 95.8 / f})
	}
	return runs
}

// cannedReport is a harness holding a whole run's canned rows, with the
// files its text quotes.
func cannedReport(t *testing.T) *harness {
	t.Helper()
	h := testHarness(t)
	h.runs = 3
	h.results = cannedReportResults(t)
	rows, err := tokenizerResults(cannedTokenizerRuns(t, true), cannedTokenizerStats, tokenizerCommandsForTest(), shellJoin, "0.6.0", "")
	if err != nil {
		t.Fatal(err)
	}
	h.results = append(h.results, rows...)
	for _, r := range cannedRegen() {
		h.results = append(h.results, r.result())
	}
	for mode, base := range map[string][2]float64{"plain": {31, 79}, "context": {20, 81}} {
		r := h.find("cost", mode)
		r.Metrics["baseline cpu-µs/req"], r.Metrics["baseline allocs/req"] = base[0], base[1]
	}
	h.info.Started, h.info.Runs, h.info.ServersRuns = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), h.runs, h.sz.ServersRuns
	h.info.LoadBefore, h.info.LoadAfter = "load average: 1.00, 1.00, 1.00", "load average: 2.00, 1.50, 1.00"
	for file, n := range map[string]string{"corpus": "7", "prompts-sources": "5", "filter-gens": "4", "ollama-prompts": "3"} {
		h.info.Facts["lines data/"+file+".jsonl"], h.info.Facts["mb data/"+file+".jsonl"] = n, "0 MB"
	}
	files := map[string]string{
		"data/regen.jsonl": `{"id":"c1","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"},{"role":"user","content":"e"}]}` + "\n" +
			`{"id":"c2","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"},{"role":"user","content":"e"},{"role":"assistant","content":"f"},{"role":"user","content":"g"}]}` + "\n",
		"tmp/regen-requests.jsonl": `{"status":200,"prompt_tokens":40,"body":{"messages":[{"role":"user","content":"a"}]}}` + "\n" +
			`{"status":200,"prompt_tokens":90,"body":{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}}` + "\n",
		"tmp/regen-a.jsonl": `{"id":"c1","output":{"usage":{"completion_tokens":300}}}` + "\n" + `{"id":"c2","output":{"usage":{"completion_tokens":100}}}` + "\n",
	}
	for name, text := range files {
		if err := os.WriteFile(h.path(name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	facts, err := h.regenFacts()
	if err != nil {
		t.Fatal(err)
	}
	h.results = append(h.results, facts)
	return h
}

func tokenizerCommandsForTest() tokenizerCommands {
	return tokenizerCommands{
		encode: []string{"taskset", "-c", "0", "env", "GOMAXPROCS=1", "go", "test", "-run", "^$", "-bench", "^BenchmarkEncode(|Cases|Cold)$", "-benchtime", "3x", "-count", "1", "./lib/tokenizer"},
		render: []string{"go", "test", "-bench", "^BenchmarkTokenizerRender$", "./internal/benchsuite"},
		load:   map[string][]string{"qwen3": {"go", "test", "load", "qwen3"}, "deepseek_v3": {"go", "test", "load", "deepseek_v3"}},
		hf:     map[string][]string{"qwen3": {"node", "hf-tokenizers.mjs", "qwen3"}, "deepseek_v3": {"node", "hf-tokenizers.mjs", "deepseek_v3"}},
	}
}

// renderSection is a section's heading and text as the report writes
// them, and its targets' rows of the Targets table.
func renderSection(t *testing.T, h *harness, s *section) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(s.heading + "\n\n")
	err := h.text(&b, s.name, h.view())
	targets, err2 := h.targets(s)
	if err = cmp.Or(err, err2); err == nil && len(targets) > 0 {
		b.WriteString("\n\n")
		err = writeTargets(&b, h.results, targets)
	}
	if err != nil {
		t.Fatal(err)
	}
	return normalise(b.String())
}

// TestReportSections: every section's text from a whole run's canned rows.
func TestReportSections(t *testing.T) {
	h := cannedReport(t)
	for _, s := range sections {
		t.Run(s.name, func(t *testing.T) {
			golden(t, "report/"+s.name+".md", []byte(renderSection(t, h, s)))
		})
	}
}

// TestRenderFromKeptRows: the rows a run keeps, read back, give the report
// it wrote, byte for byte, after a run of every section and of some.
func TestRenderFromKeptRows(t *testing.T) {
	for _, names := range [][]string{sectionNames(), {"dedup", "fleet", "regen", "tokenizer"}} {
		h := cannedReport(t)
		h.info.Sections, h.out = names, filepath.Join(t.TempDir(), "BENCHMARKS.md")
		for _, k := range machineFacts {
			h.info.Facts[k] = "a fact of " + k
		}
		if err := h.keep(); err != nil {
			t.Fatal(err)
		}
		if err := h.writeReport(); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(h.out)
		if len(names) == len(sections) {
			// The whole report, its scratch directory's name made constant.
			golden(t, "report/whole.md", []byte(strings.ReplaceAll(string(want), "`"+filepath.Base(h.dir)+"/", "`SCRATCH/")))
		}
		again := &harness{dir: h.dir, repo: h.repo, log: h.log}
		if err := again.rerender(filepath.Join(t.TempDir(), "BENCHMARKS.md")); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(again.out); string(got) != string(want) || len(want) < 10000 {
			t.Errorf("%d sections: the report from the kept rows differs (%d bytes, want %d)", len(names), len(got), len(want))
		}
	}
}

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testbin.CheckGolden(t, filepath.Join("testdata", name), got)
}

// TestOutAliasesNoRows: the report is refused a path that would replace
// the rows kept, or a directory, before anything is measured or written.
func TestOutAliasesNoRows(t *testing.T) {
	h := testHarness(t)
	h.info.Sections = sectionNames()
	for _, out := range []string{h.path("results.jsonl"), h.path("run.json"), h.dir} {
		if err := h.setOut(out); err == nil {
			t.Errorf("--out %s: accepted", out)
		}
	}
	if err := h.setOut(h.path("report.md")); err != nil {
		t.Errorf("--out report.md: %v", err)
	}
}
