package pipelines_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// tally is what the end-to-end test counts of a file: records, assistant
// turns and the tool calls they make.
type tally struct{ records, turns, calls int }

func (a tally) plus(b tally) tally {
	return tally{a.records + b.records, a.turns + b.turns, a.calls + b.calls}
}
func (a tally) minus(b tally) tally {
	return tally{a.records - b.records, a.turns - b.turns, a.calls - b.calls}
}

// chatTurn is a turn in any of the shapes the stages write: an OpenAI
// message, or a ShareGPT {from, value}.
type chatTurn struct {
	Role      string            `json:"role"`
	ToolCalls []json.RawMessage `json:"tool_calls"`
	From      string            `json:"from"`
	Value     string            `json:"value"`
}

// anyRecord is a prompt, generation, reject or training record.
type anyRecord struct {
	ID            json.RawMessage `json:"id"`
	Messages      []chatTurn      `json:"messages"`
	Conversations []chatTurn      `json:"conversations"`
	Output        *struct {
		ToolCalls    []json.RawMessage `json:"tool_calls"`
		FinishReason string            `json:"finish_reason"`
		Messages     []chatTurn        `json:"messages"`
		Turns        []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"turns"`
		Truncated *struct {
			Reason string `json:"reason"`
		} `json:"truncated"`
	} `json:"output"`
	Reject *struct {
		Reason string `json:"reason"`
	} `json:"reject"`
}

// countTurns counts the assistant turns of a conversation and their tool
// calls; in ShareGPT a turn with calls is a function_call turn (of one
// call, or a list of them), after its gpt turn when it has text.
func countTurns(turns []chatTurn) tally {
	var n tally
	for i, m := range turns {
		switch {
		case m.Role == "assistant":
			n.turns++
			n.calls += len(m.ToolCalls)
		case m.From == "function_call":
			n.turns++
			var list []json.RawMessage
			if json.Unmarshal([]byte(m.Value), &list) == nil {
				n.calls += len(list)
			} else {
				n.calls++
			}
		case m.From == "gpt" && (i+1 == len(turns) || turns[i+1].From != "function_call"):
			n.turns++
		}
	}
	return n
}

// count counts one record as its stage holds it: a regenerated
// conversation by its output.messages, a single answer by its prompt's
// turns and the answer, a prompt or training record by its turns.
func (r *anyRecord) count() tally {
	n := tally{records: 1}
	switch o := r.Output; {
	case o != nil && len(o.Messages) > 0:
		return n.plus(countTurns(o.Messages))
	case o != nil:
		n = n.plus(countTurns(r.Messages))
		return n.plus(tally{turns: 1, calls: len(o.ToolCalls)})
	case r.Messages != nil:
		return n.plus(countTurns(r.Messages))
	}
	return n.plus(countTurns(r.Conversations))
}

// readAny reads every record of a JSONL file.
func readAny(t *testing.T, path string) []anyRecord {
	t.Helper()
	return readJSONL[anyRecord](t, path)
}

// readJSONL reads every record of a JSONL file as a T.
func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r T
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v: %.200s", path, err, sc.Text())
		}
		out = append(out, r)
	}
	return out
}

func countFile(t *testing.T, path string) tally {
	t.Helper()
	var n tally
	for _, r := range readAny(t, path) {
		n = n.plus(r.count())
	}
	return n
}

// run runs a tokenmill binary in dir, failing the test unless it exits
// with code; it returns stderr.
func run(t *testing.T, dir string, code int, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, tool), args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if got := cmd.ProcessState.ExitCode(); err != nil && got < 0 || got != code {
		t.Fatalf("%s %s: exit %d (%v), want %d\n%s", tool, strings.Join(args, " "), got, err, code, stderr.String())
	}
	return stderr.String()
}

// realDataFile is the absolute path of a real dataset (skipping the test
// where the data is absent, as testbin.RealData does).
func realDataFile(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(testbin.RealData(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// summaryInt reads the number after what in a summary line (0 when the
// summary does not say it).
func summaryInt(t *testing.T, summary, what string) int {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(what) + ` (\d+)`).FindStringSubmatch(summary)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Everything a tool-calling run generates reaches the training file. Real
// datasets (glaive's tool calls, FastChat's multi-turn conversations) go
// through extract, dedup, infer on a fleet whose model calls tools (single
// answers, and with --regenerate whole conversations), filter and merge
// into each training form. Records, assistant turns and tool calls are
// counted at every stage: the training file holds what the generation
// file holds, less exactly what filter and merge report dropping, by
// reason (filter's rejects, the conversations a tool call nobody answered
// left with no complete exchange, and the turns and calls cut off the
// others), and the to-do list is exactly the records dropped.
func TestToolCallsReachTraining(t *testing.T) {
	glaive, fastchat := realDataFile(t, "glaive_toolcall_en_demo.json"), realDataFile(t, "fastchat_dummy_conversation.json")
	fleet := startFleet(t, 2, "--instant", "--seed", "3", "--tool-call-rate", "0.5", "--parallel-tool-call-rate", "0.3",
		"--empty-rate", "0.03", "--think-residue-rate", "0.03")
	for _, tc := range []struct {
		name    string
		extract []string
		infer   []string
	}{
		{"single answers", []string{glaive}, nil},
		{"regenerated conversations", []string{"--turns", "all", glaive, fastchat}, []string{"--regenerate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stages := map[string]tally{}
			run(t, dir, 0, "extract", append(tc.extract, "-o", "extracted.jsonl")...)
			stages["extract"] = countFile(t, filepath.Join(dir, "extracted.jsonl"))
			summary := run(t, dir, 0, "dedup", "-o", "prompts.jsonl", "extracted.jsonl")
			stages["dedup"] = countFile(t, filepath.Join(dir, "prompts.jsonl"))
			if kept, removed := summaryInt(t, summary, "kept"), summaryInt(t, summary, "removed"); kept != stages["dedup"].records || kept == 0 || kept+removed != stages["extract"].records {
				t.Fatalf("dedup says it kept %d and removed %d of %d, wrote %d", kept, removed, stages["extract"].records, stages["dedup"].records)
			}

			infer := append([]string{"-e", fleet, "--max-tokens", "8192", "--progress", "0", "-o", "gen.jsonl", "prompts.jsonl"}, tc.infer...)
			run(t, dir, 0, "infer", infer...)
			gen := readAny(t, filepath.Join(dir, "gen.jsonl"))
			stages["infer"] = countFile(t, filepath.Join(dir, "gen.jsonl"))
			if stages["infer"].records != stages["dedup"].records {
				t.Fatalf("%d generation records for %d prompts", stages["infer"].records, stages["dedup"].records)
			}
			callsEnd := 0 // answers and turns that end in tool calls
			for _, g := range gen {
				if g.Output.FinishReason == "tool_calls" && len(g.Output.Messages) == 0 {
					callsEnd++
				}
				for _, turn := range g.Output.Turns {
					if turn.FinishReason == "tool_calls" {
						callsEnd++
					}
				}
			}
			if callsEnd == 0 || stages["infer"].calls == 0 {
				t.Fatalf("no answer ended in tool calls (%d calls): the test shows nothing", stages["infer"].calls)
			}
			// A clean run leaves its errors file, empty, for stats.
			run(t, dir, 0, "stats", "gen.jsonl", "gen.errors.jsonl")

			summary = run(t, dir, 0, "filter", "--rejects", "gen.unfit.jsonl", "-o", "gen.fit.jsonl", "gen.jsonl")
			unfit := map[string]tally{}
			for _, r := range readAny(t, filepath.Join(dir, "gen.unfit.jsonl")) {
				unfit[r.Reject.Reason] = unfit[r.Reject.Reason].plus(r.count())
			}
			stages["filter"] = countFile(t, filepath.Join(dir, "gen.fit.jsonl"))
			var dropped tally
			for reason, n := range unfit {
				dropped = dropped.plus(n)
				if said := summaryInt(t, summary, reason); said != n.records {
					t.Errorf("filter says %s %d, its rejects file holds %d", reason, said, n.records)
				}
			}
			if stages["filter"] != stages["infer"].minus(dropped) || dropped.records == 0 {
				t.Fatalf("filter kept %+v of %+v, its rejects hold %+v", stages["filter"], stages["infer"], dropped)
			}

			var want tally
			for _, to := range []string{"messages", "conversations", "sharegpt"} {
				train, errs := "train."+to+".jsonl", "dropped."+to+".jsonl"
				summary := run(t, dir, 0, "merge", "--to", to, "--errors", errs, "-o", train, "gen.jsonl", "gen.unfit.jsonl")
				stages["merge "+to] = countFile(t, filepath.Join(dir, train))
				// What merge dropped: filter's rejects, and conversations a
				// truncation left without a complete exchange, by reason.
				byReason := map[string]tally{}
				for _, r := range readAny(t, filepath.Join(dir, errs)) {
					reason := "no answer"
					switch {
					case r.Reject != nil:
						reason = "filter " + r.Reject.Reason
					case r.Output != nil && r.Output.Truncated != nil:
						reason = "truncated " + r.Output.Truncated.Reason
					}
					byReason[reason] = byReason[reason].plus(r.count())
				}
				var merged, truncated tally
				for reason, n := range byReason {
					merged = merged.plus(n)
					switch {
					case strings.HasPrefix(reason, "filter "):
						if n != unfit[strings.TrimPrefix(reason, "filter ")] {
							t.Errorf("--to %s: merge dropped %+v as %s, filter rejected %+v", to, n, reason, unfit[strings.TrimPrefix(reason, "filter ")])
						}
					case strings.HasPrefix(reason, "truncated "):
						truncated = truncated.plus(n)
					default:
						t.Errorf("--to %s: merge dropped %+v for no reason it reports", to, n)
					}
				}
				if said := summaryInt(t, summary, "truncated conversations missing"); said != truncated.records || summaryInt(t, summary, "missing") != merged.records {
					t.Errorf("--to %s: merge says %d truncated conversations missing, dropped %d; missing %d of %d\n%s", to, said, truncated.records, summaryInt(t, summary, "missing"), merged.records, summary)
				}
				var cut tally // the turns and calls merge says it cut off
				if m := regexp.MustCompile(`left out (\d+) turns, (\d+) tool calls`).FindStringSubmatch(summary); m != nil {
					cut.turns, _ = strconv.Atoi(m[1])
					cut.calls, _ = strconv.Atoi(m[2])
				}
				want = stages["infer"].minus(merged).minus(cut)
				if stages["merge "+to] != want {
					t.Errorf("--to %s: the training file holds %+v; the generation file %+v, less %+v dropped by merge (%v) and %+v cut off: %+v\n%s",
						to, stages["merge "+to], stages["infer"], merged, byReason, cut, want, summary)
				}
				if tc.infer != nil && (truncated.records == 0 || cut.calls == 0) {
					t.Errorf("--to %s: no truncated conversation (%+v) or none cut (%+v): the test shows less than it should", to, truncated, cut)
				}
			}

			// Parquet holds the same, as extract reads it back.
			run(t, dir, 0, "merge", "--to", "conversations", "-o", "train.parquet", "gen.jsonl", "gen.unfit.jsonl")
			run(t, dir, 0, "extract", "--turns", "all", "-o", "readback.jsonl", "train.parquet")
			if got := countFile(t, filepath.Join(dir, "readback.jsonl")); got != stages["merge conversations"] {
				t.Errorf("train.parquet read back holds %+v, the JSONL %+v", got, stages["merge conversations"])
			}

			// The to-do list is the records dropped, and says how many.
			summary = run(t, dir, 0, "merge", "--prompts", "prompts.jsonl", "--missing", "-o", "todo.jsonl", "gen.jsonl", "gen.unfit.jsonl")
			todo := countFile(t, filepath.Join(dir, "todo.jsonl"))
			if dropped := stages["infer"].records - want.records; todo.records != dropped || !strings.Contains(summary, fmt.Sprintf("wrote %d to-do lines to todo.jsonl", dropped)) {
				t.Errorf("the to-do list holds %d prompts, %d were dropped:\n%s", todo.records, dropped, summary)
			}
			t.Logf("records, assistant turns, tool calls: %v; filter's rejects %v", stages, unfit)
		})
	}
}
