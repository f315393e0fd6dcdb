package extract

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// layoutCounts is what one --turns mode makes of a sample file.
type layoutCounts struct {
	turns, wrote, noPrompt int
	rejects                map[string]int
}

// kept is a field a sample's output must hold: with --turns all, the
// value at path (dot-separated keys and indexes) of output record rec, as
// compact JSON, or absent when want is "".
type kept struct {
	rec  int
	path string
	want string
}

// layoutSamples are the samples in testdata/extract written in each
// layout's published schema, with what every --turns mode gives
// (first, each, all-but-last, all) and fields the whole conversations keep.
var layoutSamples = []struct {
	file  string
	modes [4]layoutCounts
	keeps []kept
}{
	// Dolly: one blank instruction.
	{"dolly.jsonl", [4]layoutCounts{{6, 5, 0, map[string]int{"empty": 1}}, {6, 5, 0, map[string]int{"empty": 1}}, {6, 5, 0, map[string]int{"empty": 1}}, {6, 5, 0, map[string]int{"empty": 1}}}, nil},
	// HH-RLHF: a one-turn and a two-turn pair, and one whose prompts differ.
	{"hh_rlhf.jsonl", [4]layoutCounts{{3, 2, 0, mismatch}, {4, 3, 0, mismatch}, {3, 2, 0, mismatch}, {3, 2, 0, mismatch}}, nil},
	{"v1_dpo.jsonl", [4]layoutCounts{{3, 2, 0, mismatch}, {3, 2, 0, mismatch}, {3, 2, 0, mismatch}, {3, 2, 0, mismatch}}, nil},
	{"ultrafeedback_binarized.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}}, nil},
	{"trl_preference.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}}, nil},
	// Two trees: 4 prompter messages, 3 of them the last of their branch.
	{"oasst.trees.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {4, 4, 0, nil}, {3, 3, 0, nil}, {4, 4, 0, nil}}, nil},
	// The same trees as 8 messages.
	{"oasst.messages.jsonl", [4]layoutCounts{{8, 2, 6, nil}, {8, 4, 4, nil}, {8, 3, 5, nil}, {8, 4, 4, nil}}, nil},
	// Two records with an image, one text-only.
	{"llava.json", [4]layoutCounts{{3, 1, 0, multimodal(2)}, {3, 1, 0, multimodal(2)}, {3, 1, 0, multimodal(2)}, {3, 1, 0, multimodal(2)}}, nil},
	// Image, audio and video records, and one that mentions <video> in a sentence.
	{"mllm_demo.json", [4]layoutCounts{{4, 1, 0, multimodal(3)}, {4, 1, 0, multimodal(3)}, {4, 1, 0, multimodal(3)}, {4, 1, 0, multimodal(3)}}, nil},
	// Responses (text and items), chat, completions, embeddings, and a Responses image input.
	{"openai_batch.jsonl", [4]layoutCounts{{6, 4, 0, batchRejects}, {7, 5, 0, batchRejects}, {6, 4, 0, batchRejects}, {6, 4, 0, batchRejects}}, nil},
	{"pretty.json", [4]layoutCounts{{1, 1, 0, nil}, {1, 1, 0, nil}, {1, 1, 0, nil}, {1, 1, 0, nil}}, nil},

	// xtuner's openai format: each line a list of messages, loss:false on
	// a turn that is context; a line with no question.
	{"xtuner_openai.jsonl", [4]layoutCounts{{4, 3, 0, noUser}, {5, 4, 0, noUser}, {4, 3, 0, noUser}, {4, 3, 0, noUser}}, []kept{
		{0, "messages.0.content", `"You are a helpful assistant."`}, {1, "messages.1.weight", `0`}, {1, "messages.3.weight", `1`},
		{2, "messages.1.weight", ``}}},
	// OpenAI's fine-tuning examples: weights, tools with parallel_tool_calls,
	// arguments given as an object, tool_choice; a bad weight and a bad
	// tool_choice.
	{"openai_finetune.jsonl", [4]layoutCounts{{5, 3, 0, badWeightChoice}, {6, 4, 0, badWeightChoice}, {5, 3, 0, badWeightChoice}, {5, 3, 0, badWeightChoice}}, []kept{
		{0, "messages.2.weight", `0`}, {0, "messages.4.weight", `1`}, {0, "messages.1.weight", ``},
		{1, "parallel_tool_calls", `false`}, {1, "tool_choice", ``}, {1, "messages.1.tool_calls.0.id", `"call_id"`},
		{1, "messages.1.tool_calls.0.function.arguments", `"{\"location\": \"San Francisco, USA\", \"format\": \"celsius\"}"`},
		{2, "messages.1.content", `""`}, {2, "messages.1.tool_calls.0.function.arguments", `"{\"location\":\"Oslo, Norway\",\"format\":\"celsius\"}"`},
		{2, "tool_choice", `{"type":"function","function":{"name":"get_current_weather"}}`}}},
	// One tool as a list, as a single object and with its parameters as a
	// JSON string (one prompt, one id); an empty tool_calls; Llama 3.1's
	// ipython results; a developer and a system turn; malformed tool_calls.
	{"tool_shapes.jsonl", [4]layoutCounts{{10, 6, 0, badCalls}, {11, 7, 0, badCalls}, {10, 6, 0, badCalls}, {10, 6, 0, badCalls}}, []kept{
		{1, "tools", `[{"function":{"name":"convert","parameters":{"properties":{"km":{"type":"number"}},"type":"object"}},"type":"function"}]`},
		{2, "tools.0.function.parameters.properties.km.type", `"number"`},
		{3, "messages.1.tool_calls", ``}, {4, "messages.3.role", `"tool"`}, {4, "messages.3.tool_call_id", `"call_3_1"`},
		{4, "messages.2.tool_calls.0.id", `"call_3_1"`}, {5, "messages.0.content", `"Answer in French.\n\nBe brief."`}, {5, "messages.1.role", `"user"`}}},
	// Legacy OpenAI function calling: functions, function_call, role
	// function; the function_call setting as tool_choice.
	{"legacy_functions.jsonl", [4]layoutCounts{{4, 2, 0, badLegacy}, {4, 2, 0, badLegacy}, {4, 2, 0, badLegacy}, {4, 2, 0, badLegacy}}, []kept{
		{0, "tools.0.function.name", `"get_current_weather"`}, {0, "messages.1.tool_calls.0.id", `"call_2_1"`},
		{0, "messages.1.tool_calls.0.function.arguments", `"{\"location\": \"San Francisco, USA\", \"format\": \"celsius\"}"`},
		{0, "messages.2.role", `"tool"`}, {0, "messages.2.tool_call_id", `"call_2_1"`}, {0, "messages.2.name", `"get_current_weather"`},
		{1, "tool_choice", `{"type":"function","function":{"name":"get_weather_forecast"}}`}}},
	// ShareGPT weights (axolotl) and LLaMA-Factory's loss_weight, one
	// spelling; a negative weight.
	{"sharegpt_weights.json", [4]layoutCounts{{3, 2, 0, badWeight}, {5, 4, 0, badWeight}, {3, 2, 0, badWeight}, {3, 2, 0, badWeight}}, []kept{
		{0, "messages.2.weight", `0`}, {0, "messages.4.weight", `1`}, {1, "messages.1.weight", `0`}, {1, "messages.3.weight", `0.5`}}},
	// OpenOrca: system_prompt (and system_message) in the system slot; one
	// question under two system prompts is two prompts.
	{"openorca.jsonl", [4]layoutCounts{{5, 4, 0, unknownLayout}, {5, 4, 0, unknownLayout}, {5, 4, 0, unknownLayout}, {5, 4, 0, unknownLayout}}, []kept{
		{0, "messages.0.role", `"system"`}, {1, "messages.0.content", `"You are a helpful assistant, who always provide explanation. Think like you are answering to a five year old."`},
		{0, "messages.2.content", `"Water boils at 100 degrees Celsius (212 degrees Fahrenheit) at sea level."`},
		{2, "messages.0.role", `"user"`}, {3, "messages.0.content", `"You are a pirate."`}}},
	// Reasoning under thinking or reasoning; reasoning_content first; a
	// flag is not reasoning; a list of it cannot be read.
	{"reasoning.jsonl", [4]layoutCounts{{5, 4, 0, unknownLayout}, {5, 4, 0, unknownLayout}, {5, 4, 0, unknownLayout}, {5, 4, 0, unknownLayout}}, []kept{
		{0, "messages.1.reasoning_content", `"Digits sum to 6, so 3 divides it."`}, {1, "messages.1.reasoning_content", `"Not divisible by 2, 3, 5 or 7; 7² > 53."`},
		{2, "messages.1.reasoning_content", `"5 + 7 = 12."`}, {3, "messages.1.reasoning_content", ``}}},
	// OpenAI preference fine-tuning: input.messages, preferred_output kept.
	{"openai_preference.jsonl", [4]layoutCounts{{3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}}, []kept{
		{0, "messages.1.content", `"Today in San Francisco, it is not quite cold as expected. Morning clouds will give away to sunshine, with a high near 68°F (20°C) and a low around 57°F (14°C)."`},
		{0, "parallel_tool_calls", ``}, {1, "parallel_tool_calls", `false`}, {1, "messages.2.tool_calls.0.function.name", `"rain"`}, {1, "tools.0.function.name", `"rain"`}}},
	// MetaMath query/response, NuminaMath problem/solution (and its
	// messages), UltraChat data, Capybara and xtuner input/output turns,
	// xtuner's toy fields.
	{"metamath.jsonl", [4]layoutCounts{{3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}}, []kept{
		{1, "messages.1.content", `"7 times 8 is 56. The answer is: 56"`}}},
	{"numinamath.jsonl", [4]layoutCounts{{3, 2, 0, emptyOne}, {3, 2, 0, emptyOne}, {3, 2, 0, emptyOne}, {3, 2, 0, emptyOne}}, []kept{
		{0, "messages.0.content", `"What is the sum of the first 10 positive integers?"`}, {0, "messages.1.role", `"assistant"`}}},
	{"ultrachat.jsonl", [4]layoutCounts{{3, 2, 0, unknownLayout}, {4, 3, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}}, []kept{
		{0, "id", `"0"`}, {0, "messages.2.content", `"Which activities work best?"`}, {0, "messages.3.role", `"assistant"`}}},
	{"capybara.jsonl", [4]layoutCounts{{3, 2, 0, unknownLayout}, {4, 3, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}}, []kept{
		{0, "messages.3.content", `"In 1913, when the city was founded for the purpose."`}}},
	{"xtuner.jsonl", [4]layoutCounts{{3, 3, 0, nil}, {4, 4, 0, nil}, {3, 3, 0, nil}, {3, 3, 0, nil}}, []kept{
		{0, "messages.0.role", `"system"`}, {0, "messages.4.content", `"Mango."`}, {1, "messages.1.content", `"Down."`}}},
	// A ToolBench query is named as not read.
	{"toolbench_query.json", [4]layoutCounts{{1, 0, 0, toolBench}, {1, 0, 0, toolBench}, {1, 0, 0, toolBench}, {1, 0, 0, toolBench}}, nil},
	// Preference pairs read through prompt (TRL, text and turns),
	// conversations (LLaMA-Factory's ShareGPT pairs) and instruction
	// (Alpaca pairs): the chosen answer ends the whole conversation.
	{"prompted_preference.jsonl", [4]layoutCounts{{6, 6, 0, nil}, {6, 6, 0, nil}, {6, 6, 0, nil}, {6, 5, 0, unknownLayout}}, []kept{
		{0, "messages.1.content", `" blue."`}, {1, "messages.1.content", `"It is blue."`}, {2, "messages", `[{"role":"user","content":"Opposite of hot?"},{"role":"assistant","content":"Cold."}]`},
		{3, "messages.1.content", `"Hello, and welcome!"`}, {4, "messages.1.content", `"Red."`}}},
	// Bare strings in a content list are text parts.
	{"content_strings.jsonl", [4]layoutCounts{{3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}, {3, 2, 0, unknownLayout}}, []kept{
		{0, "messages.0.content", `"Describe the moon\nin one sentence."`}, {1, "messages.0.content", `"Part one,\npart two."`}}},
	// HH-RLHF turns keep their leading white space but the separator's.
	{"hh_rlhf_whitespace.jsonl", [4]layoutCounts{{2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}, {2, 2, 0, nil}}, []kept{
		{0, "messages.1.content", `"  def f(x):\n        return x\n\nIndent the body."`}, {1, "messages.0.content", `" Two spaces before me."`}}},
}

var (
	mismatch        = map[string]int{"preference_mismatch": 1}
	batchRejects    = map[string]int{"embeddings_request": 1, "multimodal": 1}
	noUser          = map[string]int{"no_user_turn": 1}
	badWeightChoice = map[string]int{"bad_weight": 1, "bad_tools": 1}
	badWeight       = map[string]int{"bad_weight": 1}
	badCalls        = map[string]int{"bad_tool_calls": 4}
	badLegacy       = map[string]int{"bad_tool_calls": 1, "bad_tools": 1}
	unknownLayout   = map[string]int{"unknown_layout": 1}
	emptyOne        = map[string]int{"empty": 1}
	toolBench       = map[string]int{"toolbench_query": 1}
)

func multimodal(n int) map[string]int { return map[string]int{"multimodal": n} }

// TestLayoutSamples runs every sample in every --turns mode: exact counts,
// exact accounting (every row of the file read, and written or rejected),
// the fields kept, no reject detail in the decoder's words, and the
// prompts and rejects against a golden file.
func TestLayoutSamples(t *testing.T) {
	modes := []string{TurnsFirst, TurnsEach, TurnsAllButLast, TurnsAll}
	for _, s := range layoutSamples {
		t.Run(s.file, func(t *testing.T) {
			var golden bytes.Buffer
			path := filepath.Join(ourData, s.file)
			rows := sampleRows(t, path)
			for i, mode := range modes {
				rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
				r := run(t, nil, nil, "--turns", mode, "--rejects", rejects, path)
				checkAccounting(t, r)
				if r.sum.read != rows {
					t.Errorf("--turns %s: read %d records of %d rows", mode, r.sum.read, rows)
				}
				checkDetails(t, rejects)
				if mode == TurnsAll {
					checkKept(t, r.stdout, s.keeps)
				}
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
			testbin.CheckGolden(t, filepath.Join(ourData, "golden", "layouts", s.file+".txt"), golden.Bytes())
		})
	}
}

// sampleRows counts a sample's rows on its own: the lines of JSON Lines
// (the oasst trees and messages included), the elements of a JSON array,
// one for a pretty-printed object.
func sampleRows(t *testing.T, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasSuffix(path, ".jsonl"):
		return len(outLines(data))
	case bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")):
		var elems []stdjson.RawMessage
		if err := stdjson.Unmarshal(data, &elems); err != nil {
			t.Fatal(err)
		}
		return len(elems)
	}
	return 1
}

// decoderWords are what a Go decoder's error says that no reject detail
// may: its types, its verbs, its echo of the input.
var decoderWords = regexp.MustCompile(`Go (value|struct)|unmarshal|json:|RawMessage|extract\.|\[\]uint8|looking for beginning`)

// checkDetails reads a rejects file: every reject has a detail, none in
// the decoder's words.
func checkDetails(t *testing.T, rejects string) {
	t.Helper()
	for _, rj := range readJSONL[struct {
		Reject struct{ Reason, Detail string }
	}](t, rejects) {
		if rj.Reject.Detail == "" || decoderWords.MatchString(rj.Reject.Detail) {
			t.Errorf("%s: detail %q", rj.Reject.Reason, rj.Reject.Detail)
		}
	}
}

// checkKept checks the fields a sample's whole conversations keep.
func checkKept(t *testing.T, out []byte, keeps []kept) {
	t.Helper()
	recs := decodeLines[any](t, out)
	for _, k := range keeps {
		if k.rec >= len(recs) {
			t.Errorf("record %d: only %d written", k.rec, len(recs))
			continue
		}
		v, ok := recs[k.rec], true
		for _, step := range strings.Split(k.path, ".") {
			switch c := v.(type) {
			case map[string]any:
				v, ok = c[step]
			case []any:
				n, err := strconv.Atoi(step)
				ok = err == nil && n < len(c)
				if ok {
					v = c[n]
				}
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		got := ""
		if ok {
			b, _ := stdjson.Marshal(v)
			if got = string(b); k.want != "" && sameJSON(t, got, k.want) {
				continue
			}
		}
		if got != k.want {
			t.Errorf("record %d %s: got %s, want %s", k.rec, k.path, orAbsent(got), orAbsent(k.want))
		}
	}
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
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

// The id and dedup's key are one rule: one tool written as a list, as a
// single object or with its parameters as a JSON string is one prompt
// (dedup keeps one); prompts that differ only in their legacy functions,
// or only in their system prompt (OpenOrca's system_prompt), are
// different prompts (dedup keeps each).
func TestLayoutsThroughDedup(t *testing.T) {
	tests := []struct {
		file        string
		wrote, kept int
	}{
		{"tool_shapes.jsonl", 6, 4},
		{"legacy_functions.jsonl", 2, 2},
		{"openorca.jsonl", 4, 4},
		{"openai_finetune.jsonl", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r := run(t, nil, nil, filepath.Join(ourData, tt.file))
			checkAccounting(t, r)
			ids := map[string]bool{}
			for _, p := range prompts(t, r.stdout) {
				ids[fmt.Sprint(p.ID)] = true
			}
			d := testbin.Run(t, "", bytes.NewReader(r.stdout), nil, "dedup")
			if r.sum.wrote != tt.wrote || len(ids) != tt.kept || len(outLines(d.Stdout)) != tt.kept || !strings.Contains(d.Stderr, fmt.Sprintf("kept %d,", tt.kept)) {
				t.Fatalf("wrote %d prompts with %d ids, dedup kept %d; want %d, %d ids, %d kept\n%s", r.sum.wrote, len(ids), len(outLines(d.Stdout)), tt.wrote, tt.kept, tt.kept, d.Stderr)
			}
		})
	}
}
