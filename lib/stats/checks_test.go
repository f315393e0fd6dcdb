package stats

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

func genLine(id, text, finish string) string {
	out, _ := json.Marshal(map[string]any{"text": text, "finish_reason": finish, "sample": 0})
	return `{"id":"` + id + `","messages":[{"role":"user","content":"Tell me about plants."}],"output":` + string(out) + "}"
}

// TestChecksReport: stats --checks counts what filter would drop, by
// reason and per check, with the first records failing each, and drops
// nothing; the empty count is there with or without --checks.
func TestChecksReport(t *testing.T) {
	loop := "Plants need light. " + strings.Repeat("Plants need water to grow. ", 40)
	lines := []string{
		genLine("ok", "Plants make their food from light, water and air.", "stop"),
		genLine("cut", loop, "length"), // length first, loop too
		genLine("loop", loop, "stop"),
		genLine("empty", "", "stop"),
		genLine("residue", "<think>hmm</think> Plants grow.", "stop"),
		`{"id":"conv","messages":[{"role":"user","content":"hi"}],"output":{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":" "}],"turns":[{"message":1,"finish_reason":"stop"}]}}`,
		`{"id":"e","prompt":"p","error":{"status":500,"message":"x"}}`,
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)

	r := testbin.Run(t, dir, nil, nil, "stats", "--json", "--checks", "default", in)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep Report
	if err := json.Unmarshal(r.Stdout, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != "tokenmill.stats/v1" || rep.Empty != 2 || rep.Checks == nil {
		t.Fatalf("schema %s, empty %d, checks %v", rep.Schema, rep.Empty, rep.Checks)
	}
	c := rep.Checks
	if c.Records != 6 || c.Answers != 6 || c.Fit != 1 || c.Unfit != 5 {
		t.Errorf("records %d answers %d fit %d unfit %d", c.Records, c.Answers, c.Fit, c.Unfit)
	}
	byReason := map[string]int64{}
	for _, x := range c.ByReason {
		byReason[x.Name] = x.Count
	}
	if want := map[string]int64{"length": 1, "loop": 1, "empty": 2, "think_residue": 1}; !equalCounts(byReason, want) {
		t.Errorf("by reason %v, want %v", byReason, want)
	}
	per := map[string]CheckCount{}
	for _, x := range c.PerCheck {
		per[x.Check] = x
	}
	if per["loop"].Count != 2 || len(per["loop"].Examples) != 2 || per["loop"].Examples[0].ID.Text != "cut" ||
		per["loop"].Examples[0].Line != 2 || per["loop"].Examples[1].Detail == "" {
		t.Errorf("loop: %+v", per["loop"])
	}
	if e := per["empty"].Examples; len(e) != 2 || e[1].ID.Text != "conv" || e[1].Turn == nil || *e[1].Turn != 0 {
		t.Errorf("empty: %+v", per["empty"])
	}
	if _, ok := per["lang"]; ok {
		t.Errorf("lang reported though not asked for")
	}

	r = testbin.Run(t, dir, nil, nil, "stats", "--checks", "all", in)
	for _, s := range []string{"quality checks (length, think_block, reasoning_only, empty, think_residue, tool_call, loop, lang): 6 records checked (6 answers), 1 fit, 5 unfit",
		"empty answers: 2 records", `"loop" (` + in + ":3)"} {
		if !strings.Contains(string(r.Stdout), s) {
			t.Errorf("text report lacks %q:\n%s", s, r.Stdout)
		}
	}
	r = testbin.Run(t, dir, nil, nil, "stats", "--json", in)
	if strings.Contains(string(r.Stdout), `"checks"`) || !strings.Contains(string(r.Stdout), `"empty": 2`) {
		t.Errorf("without --checks: %s", r.Stdout)
	}
	if r := testbin.Run(t, dir, nil, nil, "stats", "--checks", "loops", in); r.Code != 2 {
		t.Errorf("an unknown check: exit %d", r.Code)
	}
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
