package infer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/conversation"
	"tokenmill/lib/ledger"
	"tokenmill/lib/record"
)

// Which journaled turns a resume keeps: an attempt's lines are live while
// -o holds as many records of its (id, sample) as when it began; a later
// attempt at the same conversation replaces an earlier one; a gap ends an
// attempt's turns. The journal is compacted to the live lines.
func TestJournalLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gen.jsonl.turns")
	line := func(id string, base, turn int, fp string) string {
		b, _ := json.Marshal(conversation.JournalLine{ID: record.StringID(id), Sample: 0, FP: fp, Base: base, Turn: turn,
			Answer: record.Message{Role: "assistant", Content: fmt.Sprintf("%s-%d-%d", id, base, turn)}, Meta: record.Turn{Message: 1}})
		return string(b)
	}
	lines := []string{
		line("done", 0, 0, "f"), line("done", 0, 1, "f"), // its record is in -o: stale
		line("redo", 0, 0, "f"), line("redo", 0, 1, "f"), // the first attempt, whose (length) record is in -o: stale
		line("redo", 1, 0, "f"), // the redo, killed after its first turn: live
		line("open", 0, 0, "f"), line("open", 0, 1, "f"), line("open", 0, 2, "f"),
		line("gap", 0, 0, "f"), line("gap", 0, 2, "f"), // turn 1 missing: turn 2 is not kept
		line("changed", 0, 0, "x"), line("changed", 0, 1, "x"), line("changed", 0, 0, "y"), // the record changed: started over
		`{"id":"torn","sample":0,"fp":"f","turn":0,"answ`,
	}
	os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
	var warned []string
	warn := func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }
	counts, err := ledger.JournalKeys(path, warn)
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New()
	// -o holds a good record of "done" and a length record of "redo" (left to redo).
	counts[conversation.Key("done", 0)]++
	l.MarkDone("done", 0)
	counts[conversation.Key("redo", 0)]++
	jn := conversation.NewJournal(path)
	convs, turns, err := jn.Load(counts, l.Done, warn)
	if err != nil {
		t.Fatal(err)
	}
	if convs != 4 || turns != 1+3+1+1 {
		t.Errorf("kept %d conversations, %d turns", convs, turns)
	}
	want := map[string]string{"redo": "redo-1-0", "open": "open-0-0,open-0-1,open-0-2", "gap": "gap-0-0", "changed": "changed-0-0"}
	for id, w := range want {
		fp := "f"
		if id == "changed" {
			fp = "y"
		}
		var got []string
		for _, l := range jn.Claim(id, 0, fp) {
			got = append(got, l.Answer.Content)
		}
		if strings.Join(got, ",") != w {
			t.Errorf("%s: claimed %v, want %s", id, got, w)
		}
	}
	if got := jn.Claim("changed", 0, "x"); got != nil {
		t.Errorf("turns claimed twice: %v", got)
	}
	if jn.Base("redo", 0) != 1 || jn.Base("open", 0) != 0 {
		t.Errorf("bases: redo %d open %d", jn.Base("redo", 0), jn.Base("open", 0))
	}
	// The journal now holds the live lines alone, whole.
	data, _ := os.ReadFile(path)
	if n := strings.Count(string(data), "\n"); n != turns || strings.Contains(string(data), "torn") || strings.Contains(string(data), `"fp":"x"`) {
		t.Errorf("compacted journal:\n%s", data)
	}
	if len(warned) == 0 || !strings.Contains(warned[0], "partial last line") {
		t.Errorf("warnings %q", warned)
	}
}
