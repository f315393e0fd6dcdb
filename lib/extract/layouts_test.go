package extract

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// layoutCounts is what one --turns mode makes of a sample file.
type layoutCounts struct {
	turns, wrote, noPrompt int
	rejects                map[string]int
}

// layoutSamples are the samples in testdata/extract written in each
// layout's published schema, with what every --turns mode gives
// (first, each, all-but-last, all).
var layoutSamples = []struct {
	file  string
	modes [4]layoutCounts
}{
	// Dolly: one blank instruction.
	{"dolly.jsonl", [4]layoutCounts{{6, 5, 0, map[string]int{"empty": 1}}, {6, 5, 0, map[string]int{"empty": 1}}, {6, 5, 0, map[string]int{"empty": 1}}, {6, 5, 0, map[string]int{"empty": 1}}}},
	// HH-RLHF: a one-turn and a two-turn pair, and one whose prompts differ.
	{"hh_rlhf.jsonl", [4]layoutCounts{{3, 2, 0, mismatch}, {4, 3, 0, mismatch}, {3, 2, 0, mismatch}, {3, 2, 0, mismatch}}},
	{"v1_dpo.jsonl", [4]layoutCounts{{3, 2, 0, mismatch}, {3, 2, 0, mismatch}, {3, 2, 0, mismatch}, {3, 2, 0, mismatch}}},
	{"ultrafeedback_binarized.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}}},
	{"trl_preference.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}}},
	// Two trees: 4 prompter messages, 3 of them the last of their branch.
	{"oasst.trees.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {4, 4, 0, nil}, {3, 3, 0, nil}, {4, 4, 0, nil}}},
	// The same trees as 8 messages.
	{"oasst.messages.jsonl", [4]layoutCounts{{8, 2, 6, nil}, {8, 4, 4, nil}, {8, 3, 5, nil}, {8, 4, 4, nil}}},
	// Two records with an image, one text-only.
	{"llava.json", [4]layoutCounts{{3, 1, 0, multimodal(2)}, {3, 1, 0, multimodal(2)}, {3, 1, 0, multimodal(2)}, {3, 1, 0, multimodal(2)}}},
	// Image, audio and video records, and one that mentions <video> in a sentence.
	{"mllm_demo.json", [4]layoutCounts{{4, 1, 0, multimodal(3)}, {4, 1, 0, multimodal(3)}, {4, 1, 0, multimodal(3)}, {4, 1, 0, multimodal(3)}}},
	// Responses (text and items), chat, completions, embeddings, and a Responses image input.
	{"openai_batch.jsonl", [4]layoutCounts{{6, 4, 0, batchRejects}, {7, 5, 0, batchRejects}, {6, 4, 0, batchRejects}, {6, 4, 0, batchRejects}}},
	{"pretty.json", [4]layoutCounts{{1, 1, 0, nil}, {1, 1, 0, nil}, {1, 1, 0, nil}, {1, 1, 0, nil}}},
}

var (
	mismatch     = map[string]int{"preference_mismatch": 1}
	batchRejects = map[string]int{"embeddings_request": 1, "multimodal": 1}
)

func multimodal(n int) map[string]int { return map[string]int{"multimodal": n} }

// TestLayoutSamples runs every sample in every --turns mode: exact counts,
// exact accounting, and the prompts and rejects against a golden file.
func TestLayoutSamples(t *testing.T) {
	modes := []string{TurnsFirst, TurnsEach, TurnsAllButLast, TurnsAll}
	for _, s := range layoutSamples {
		t.Run(s.file, func(t *testing.T) {
			var golden bytes.Buffer
			for i, mode := range modes {
				rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
				r := run(t, nil, nil, "--turns", mode, "--rejects", rejects, filepath.Join(ourData, s.file))
				checkAccounting(t, r)
				want := s.modes[i]
				if want.rejects == nil {
					want.rejects = map[string]int{}
				}
				got := layoutCounts{r.sum.turns, r.sum.wrote, r.sum.noPrompt, r.sum.rejectReasons}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("--turns %s: got %+v, want %+v\n%s", mode, got, want, r.stderr)
				}
				rj, err := os.ReadFile(rejects)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&golden, "## --turns %s\n%s## rejects\n%s", mode, r.stdout, rj)
			}
			checkGolden(t, filepath.Join(ourData, "golden", "layouts", s.file+".txt"), golden.Bytes())
		})
	}
}

// The two OpenAssistant exports hold the same trees, so they give the same
// prompts, in the same order, in every mode.
func TestOAsstTreesAndMessagesAgree(t *testing.T) {
	for _, mode := range []string{TurnsFirst, TurnsEach, TurnsAllButLast, TurnsAll} {
		trees := run(t, nil, nil, "--turns", mode, filepath.Join(ourData, "oasst.trees.jsonl"))
		flat := run(t, nil, nil, "--turns", mode, filepath.Join(ourData, "oasst.messages.jsonl"))
		if len(trees.stdout) == 0 || !bytes.Equal(trees.stdout, flat.stdout) {
			t.Errorf("--turns %s: trees give\n%s\nmessages give\n%s", mode, trees.stdout, flat.stdout)
		}
		// Held messages come out before the next file's records.
		both := run(t, nil, nil, "--turns", mode, filepath.Join(ourData, "oasst.messages.jsonl"), filepath.Join(ourData, "dolly.jsonl"))
		dolly := run(t, nil, nil, "--turns", mode, filepath.Join(ourData, "dolly.jsonl"))
		checkAccounting(t, both)
		if !bytes.Equal(both.stdout, append(append([]byte(nil), flat.stdout...), dolly.stdout...)) {
			t.Errorf("--turns %s: messages then dolly in one run differ from the two runs in order", mode)
		}
	}
}

// flatMessages is the flat OpenAssistant sample's lines.
func flatMessages(t *testing.T) [][]byte {
	data, err := os.ReadFile(filepath.Join(ourData, "oasst.messages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return outLines(data)
}

// TestOAsstHeldMessages drives the bound on held messages and the rule that
// a tree's messages come together: whatever goes wrong, every message ends
// up once as a prompt, a reject with its own line, or a message that ends
// no prompt.
func TestOAsstHeldMessages(t *testing.T) {
	lines := flatMessages(t) // tree 1: lines 1-6, tree 2: lines 7-8
	interleaved := [][]byte{lines[0], lines[6], lines[1], lines[7], lines[2], lines[3], lines[4], lines[5]}
	tests := []struct {
		name    string
		lines   [][]byte
		args    []string
		want    layoutCounts
		rejects map[string][]int // reason: lines
	}{
		// Two messages of tree 1 fit; the other four are rejected, and
		// the two held ones still make their prompts.
		{"max-held", lines, []string{"--max-held", "2", "--turns", "each"},
			layoutCounts{8, 2, 2, map[string]int{"max_held": 4}}, map[string][]int{"max_held": {3, 4, 5, 6}}},
		// Trees that are not kept together: every reply finds its
		// parent gone with the tree before it.
		{"interleaved trees", interleaved, []string{"--turns", "each"},
			layoutCounts{8, 2, 0, map[string]int{"missing_parent": 6}}, map[string][]int{"missing_parent": {3, 4, 5, 6, 7, 8}}},
		// A reply rejected for its role takes its replies with it.
		{"a bad message and the ones below it", [][]byte{lines[0], bytes.Replace(lines[1], []byte(`"role": "assistant"`), []byte(`"role": "moderator"`), 1), lines[2], lines[3], lines[4]},
			[]string{"--turns", "each"},
			layoutCounts{5, 1, 0, map[string]int{"unknown_role": 1, "missing_parent": 3}}, map[string][]int{"unknown_role": {2}, "missing_parent": {3, 4, 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in, rejects := filepath.Join(dir, "messages.jsonl"), filepath.Join(dir, "rejects.jsonl")
			if err := os.WriteFile(in, append(bytes.Join(tt.lines, []byte("\n")), '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			r := run(t, nil, nil, append(tt.args, "--rejects", rejects, in)...)
			checkAccounting(t, r)
			got := layoutCounts{r.sum.turns, r.sum.wrote, r.sum.noPrompt, r.sum.rejectReasons}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v\n%s", got, tt.want, r.stderr)
			}
			gotLines := map[string][]int{}
			for _, rj := range readJSONL[struct {
				MessageID string `json:"message_id"`
				Reject    struct {
					Reason string
					Line   int
				}
			}](t, rejects) {
				if rj.MessageID == "" {
					t.Errorf("a reject without its message: %+v", rj)
				}
				gotLines[rj.Reject.Reason] = append(gotLines[rj.Reject.Reason], rj.Reject.Line)
			}
			if !reflect.DeepEqual(gotLines, tt.rejects) {
				t.Errorf("rejected lines %v, want %v", gotLines, tt.rejects)
			}
		})
	}
}

// A pretty-printed file gives what the same object on one line gives.
func TestPrettyPrintedFile(t *testing.T) {
	path := filepath.Join(ourData, "pretty.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := stdjson.Compact(&compact, data); err != nil {
		t.Fatal(err)
	}
	pretty := run(t, nil, nil, path)
	oneLine := run(t, bytes.NewReader(append(compact.Bytes(), '\n')), nil)
	if pretty.code != 0 || !bytes.Equal(pretty.stdout, oneLine.stdout) || pretty.sum.wrote != 1 {
		t.Fatalf("pretty: exit %d %s; one line: %s", pretty.code, pretty.stdout, oneLine.stdout)
	}
}

// glaive's tool-calling records often share their first question while
// offering different tools. Those are different prompts: different ids,
// and dedup keeps each. The expectation is computed here from the dataset
// itself: one prompt per distinct (first human turn, tools as JSON).
func TestRealGlaiveToolsSetPromptsApart(t *testing.T) {
	needRealData(t)
	path := filepath.Join(realData, "glaive_toolcall_en_demo.json")
	var source []shareGPTRecord
	readJSON(t, path, &source)
	distinct := map[string]bool{}
	byQuestion := map[string]map[string]bool{}
	for _, rec := range source {
		var tools any
		if rec.Tools != "" {
			if err := stdjson.Unmarshal([]byte(rec.Tools), &tools); err != nil {
				t.Fatal(err)
			}
		}
		if l, ok := tools.([]any); ok && len(l) == 0 {
			tools = nil
		}
		canon, _ := stdjson.Marshal(tools) // sorted keys
		q := rec.Conversations[0].Value
		distinct[q+"\x00"+string(canon)] = true
		if byQuestion[q] == nil {
			byQuestion[q] = map[string]bool{}
		}
		byQuestion[q][string(canon)] = true
	}
	shared := 0
	for _, tools := range byQuestion {
		if len(tools) > 1 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("the dataset has no question asked with different tools: the test shows nothing")
	}
	r := run(t, nil, nil, "--turns", "first", path)
	checkAccounting(t, r)
	ids := map[string]bool{}
	for _, p := range prompts(t, r.stdout) {
		ids[fmt.Sprint(p.ID)] = true
	}
	if len(ids) != len(distinct) || len(byQuestion) >= len(distinct) {
		t.Fatalf("%d distinct ids, want %d (one per question and tools; %d questions, %d asked with different tools)", len(ids), len(distinct), len(byQuestion), shared)
	}
	d := testbin.Run(t, "", bytes.NewReader(r.stdout), nil, "dedup")
	kept := outLines(d.Stdout)
	if d.Code != 0 || len(kept) != len(distinct) || !strings.Contains(d.Stderr, fmt.Sprintf("kept %d,", len(distinct))) {
		t.Fatalf("dedup kept %d of %d prompts, want %d (exit %d): %s", len(kept), len(source), len(distinct), d.Code, d.Stderr)
	}
}

// --max-held has its environment variable, and must hold something.
func TestMaxHeldFlag(t *testing.T) {
	path := filepath.Join(ourData, "oasst.messages.jsonl")
	r := run(t, nil, []string{"TOKENMILL_EXTRACT_MAX_HELD=2"}, "--turns", "each", path)
	checkAccounting(t, r)
	if r.sum.rejectReasons["max_held"] != 4 || r.sum.wrote != 2 {
		t.Fatalf("TOKENMILL_EXTRACT_MAX_HELD=2: %+v", r.sum)
	}
	if r := run(t, nil, nil, "--max-held", "0", path); r.code != 2 || !strings.Contains(r.stderr, "--max-held") || len(r.stdout) != 0 {
		t.Fatalf("--max-held 0: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
}
