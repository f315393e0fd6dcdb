package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	librecord "tokenmill/lib/record"
)

// tokenGen is a generation record's token ids as infer --token-ids
// writes them.
type tokenGen struct {
	ID     json.RawMessage `json:"id"`
	Output struct {
		Text           string  `json:"text"`
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		TokenIDs       []int32 `json:"token_ids"`
		Messages       []struct {
			Content          string            `json:"content"`
			ReasoningContent string            `json:"reasoning_content"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
		Turns []struct {
			Message        int     `json:"message"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
			TokenIDs       []int32 `json:"token_ids"`
		} `json:"turns"`
		Truncated *struct {
			Reason string `json:"reason"`
		} `json:"truncated"`
	} `json:"output"`
}

// trained is the record as training rows hold it: a conversation a tool
// call nobody answered ended, up to its last turn that made no call (its
// last complete exchange); ok false when none is left.
func (g tokenGen) trained() (tokenGen, bool) {
	tr := g.Output.Truncated
	if tr == nil || tr.Reason != "tool_unpaired" && tr.Reason != "tool_rounds" {
		return g, true
	}
	ts := g.Output.Turns
	for len(ts) > 0 && len(g.Output.Messages[ts[len(ts)-1].Message].ToolCalls) > 0 {
		ts = ts[:len(ts)-1]
	}
	g.Output.Turns = ts
	return g, len(ts) > 0
}

// tokenTally counts token-id records: records, generation events and the
// answers' ids (what --to tokens puts loss on).
type tokenTally struct{ records, events, answerIDs int }

func readTokenGens(t *testing.T, path string) []tokenGen {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []tokenGen
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var g tokenGen
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, g)
	}
	return out
}

func tallyTokens(gens []tokenGen) tokenTally {
	var n tokenTally
	for _, g := range gens {
		n.records++
		if len(g.Output.Turns) == 0 {
			n.events++
			n.answerIDs += len(g.Output.TokenIDs)
		}
		for _, tu := range g.Output.Turns {
			n.events++
			n.answerIDs += len(tu.TokenIDs)
		}
	}
	return n
}

// breaks tells whether a conversation's turns are not one sequence: a
// turn's prompt does not begin with the turn before's prompt and answer.
func breaks(g tokenGen) bool {
	ts := g.Output.Turns
	for k := 1; k < len(ts); k++ {
		prefix := append(slices.Clone(ts[k-1].PromptTokenIDs), ts[k-1].TokenIDs...)
		if len(ts[k].PromptTokenIDs) < len(prefix) || !slices.Equal(ts[k].PromptTokenIDs[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

// hasDrift tells whether a text has a word the simulated tokenizer
// re-tokenizes otherwise than it was generated.
func hasDrift(text string) bool {
	for _, w := range llmsim.DriftWords {
		if strings.Contains(text, " "+w+".") {
			return true
		}
	}
	return false
}

// driftBefore tells whether an answer before a conversation's last has
// such a word.
func driftBefore(g tokenGen) bool {
	ts := g.Output.Turns
	for _, tu := range ts[:max(len(ts)-1, 0)] {
		if hasDrift(g.Output.Messages[tu.Message].Content) {
			return true
		}
	}
	return false
}

// Token-exact rows reach the training file from real datasets: glaive's
// and FastChat's records go through extract, dedup, infer --token-ids on
// llmsim (single answers; whole conversations with --regenerate on a
// template that keeps the history as generated, and on a Qwen3-style one
// that drops earlier reasoning), filter (with the training window) and
// merge --to tokens. At every stage the records, the generation events
// and the answers' ids are counted: the rows hold exactly the events and
// answer ids of the records filter kept, one row per single answer and
// per prefix-consistent conversation, a row per turn of the others, as
// many of each as the test finds itself and merge's summary and manifest
// say.
func TestTokenRowsReachTraining(t *testing.T) {
	if testing.Short() && !testbin.IsLong() {
		t.Skip("-short: TOKENMILL_TEST_LONG=1 runs it anyway")
	}
	glaive, fastchat := realDataFile(t, "glaive_toolcall_en_demo.json"), realDataFile(t, "fastchat_dummy_conversation.json")
	chatml := startFleet(t, 2, "--instant", "--seed", "5", "--chat-template", "chatml", "--tool-call-rate", "0.4")
	qwen3 := startFleet(t, 1, "--instant", "--seed", "5", "--chat-template", "qwen3", "--reasoning")
	for _, tc := range []struct {
		name     string
		fleet    string
		extract  []string
		infer    []string
		why      string // the one reason conversations break, if any
		perTurns bool   // some conversations must give a row per turn
		// infer's --max-tokens; filter's --max-train-tokens and --min-loss-tokens
		maxTokens       string
		window, minLoss int
	}{
		{"single answers", chatml, []string{glaive, fastchat}, nil, "", false, "64", 120, 30},
		{"regenerated, prefix-consistent template", chatml, []string{"--turns", "all", glaive, fastchat}, []string{"--regenerate"}, "answer re-tokenized", true, "64", 200, 60},
		// Long enough for the answers to get past their reasoning.
		{"regenerated, reasoning dropped", qwen3, []string{"--turns", "all", fastchat}, []string{"--regenerate", "--history-reasoning"}, librecord.NotPrefixReasoning, true, "700", 1500, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			run(t, dir, 0, "extract", append(tc.extract, "-o", "extracted.jsonl")...)
			extracted := countFile(t, filepath.Join(dir, "extracted.jsonl")).records
			run(t, dir, 0, "dedup", "-o", "prompts.jsonl", "extracted.jsonl")
			prompts := countFile(t, filepath.Join(dir, "prompts.jsonl")).records
			if prompts == 0 || prompts > extracted {
				t.Fatalf("dedup kept %d of %d", prompts, extracted)
			}

			run(t, dir, 0, "infer", append([]string{"-e", tc.fleet, "--token-ids", "--max-tokens", tc.maxTokens, "--progress", "0", "-o", "gen.jsonl", "prompts.jsonl"}, tc.infer...)...)
			gen := readTokenGens(t, filepath.Join(dir, "gen.jsonl"))
			inferred := tallyTokens(gen)
			if inferred.records != prompts {
				t.Fatalf("%d generation records for %d prompts", inferred.records, prompts)
			}

			summary := run(t, dir, 0, "filter", "--checks", "reasoning_only,empty,think_residue,tool_call,loop", "--max-train-tokens", strconv.Itoa(tc.window), "--min-loss-tokens", strconv.Itoa(tc.minLoss),
				"--rejects", "unfit.jsonl", "-o", "fit.jsonl", "gen.jsonl")
			fit, unfit := readTokenGens(t, filepath.Join(dir, "fit.jsonl")), readTokenGens(t, filepath.Join(dir, "unfit.jsonl"))
			kept, dropped := tallyTokens(fit), tallyTokens(unfit)
			if kept.records+dropped.records != inferred.records || kept.events+dropped.events != inferred.events || kept.answerIDs+dropped.answerIDs != inferred.answerIDs {
				t.Fatalf("filter kept %+v and dropped %+v of %+v", kept, dropped, inferred)
			}
			// What merge trains on: the tool-truncated conversations cut to
			// their last complete exchange, those with none left out.
			var trained []tokenGen
			for _, g := range fit {
				if g, ok := g.trained(); ok {
					trained = append(trained, g)
				}
			}
			cut := tallyTokens(trained)
			if summaryInt(t, summary, "too_long_for_training")+summaryInt(t, summary, "too_few_loss_tokens") == 0 {
				t.Errorf("the training window dropped nothing: the test shows less than it should\n%s", summary)
			}

			// What the rows must be, found here from the ids.
			var wantRows, perTurn int
			for _, g := range trained {
				switch {
				case len(g.Output.Turns) == 0:
					wantRows++
				case breaks(g):
					perTurn++
					wantRows += len(g.Output.Turns)
					if tc.why == "answer re-tokenized" && !driftBefore(g) {
						t.Errorf("conversation %s breaks with no drift word in its earlier answers", g.ID)
					}
				default:
					wantRows++
					if tc.why == "answer re-tokenized" && driftBefore(g) {
						t.Errorf("conversation %s is one sequence with a drift word in an earlier answer", g.ID)
					}
				}
			}
			if tc.perTurns && perTurn == 0 {
				t.Fatalf("no conversation gives a row per turn: the test shows less than it should")
			}

			summary = run(t, dir, 0, "merge", "--to", "tokens", "-o", "rows.jsonl", "fit.jsonl")
			rows := readAny(t, filepath.Join(dir, "rows.jsonl"))
			// A single answer's row ends with the ids it was generated as,
			// those whose text re-tokenizes otherwise too.
			generated := map[string]tokenGen{}
			drifted := 0
			for _, g := range trained {
				if len(g.Output.Turns) == 0 {
					generated[string(g.ID)] = g
				}
			}
			var loss, tokens int
			for _, line := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "rows.jsonl"))), "\n") {
				var r struct {
					ID              json.RawMessage `json:"id"`
					InputIDs        []int32         `json:"input_ids"`
					LossMask        []int32         `json:"loss_mask"`
					NumPromptTokens int             `json:"num_prompt_tokens"`
				}
				json.Unmarshal([]byte(line), &r)
				if g, ok := generated[string(r.ID)]; ok {
					if !slices.Equal(r.InputIDs[r.NumPromptTokens:], g.Output.TokenIDs) {
						t.Fatalf("row %s: its answer is not the ids generated", r.ID)
					}
					if hasDrift(g.Output.Text) {
						drifted++
					}
				}
				if len(r.InputIDs) != len(r.LossMask) || len(r.InputIDs) > tc.window {
					t.Fatalf("a row of %d ids, %d mask values", len(r.InputIDs), len(r.LossMask))
				}
				tokens += len(r.InputIDs)
				for _, m := range r.LossMask {
					loss += int(m)
				}
			}
			if len(generated) > 0 && drifted == 0 {
				t.Errorf("no single answer re-tokenizes otherwise: the test shows less than it should")
			}
			if len(rows) != wantRows || loss != cut.answerIDs {
				t.Fatalf("%d rows, %d tokens with loss; want %d rows and the %d answer ids filter kept (cut to complete exchanges)\n%s", len(rows), loss, wantRows, cut.answerIDs, summary)
			}
			// A conversation whose reasoning the history drops and whose text
			// also re-tokenizes early on is counted by what broke first.
			broke := summaryInt(t, summary, "not prefix-consistent: "+tc.why) + summaryInt(t, summary, ", "+tc.why)
			if tc.why == librecord.NotPrefixReasoning {
				broke += summaryInt(t, summary, "not prefix-consistent: "+librecord.NotPrefixRetokenized)
			}
			if said := summaryInt(t, summary, "token rows"); said != wantRows || broke != perTurn && perTurn > 0 {
				t.Errorf("merge's summary: %s", summary)
			}
			var m struct {
				Counts struct {
					Rows       int            `json:"rows"`
					Events     int            `json:"events"`
					LossTokens int            `json:"loss_tokens"`
					Tokens     int            `json:"input_tokens"`
					NotPrefix  map[string]int `json:"not_prefix_consistent"`
				} `json:"counts"`
				Servers []struct {
					Server string `json:"server"`
				} `json:"servers"`
				ChatTemplates []any `json:"chat_templates"`
			}
			if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "rows.jsonl.manifest.json"))), &m); err != nil {
				t.Fatal(err)
			}
			if c := m.Counts; c.Rows != wantRows || c.Events != cut.events || c.LossTokens != loss || c.Tokens != tokens || c.NotPrefix[tc.why] == 0 && perTurn > 0 ||
				len(m.Servers) != 1 || m.Servers[0].Server != "sglang" || len(m.ChatTemplates) != 1 {
				t.Errorf("manifest %+v", m)
			}
			// The same rows in Parquet, counted by the manifest beside it.
			run(t, dir, 0, "merge", "--to", "tokens", "-o", "rows.parquet", "fit.jsonl")
			if pq := readFile(t, filepath.Join(dir, "rows.parquet.manifest.json")); !strings.Contains(pq, fmt.Sprintf(`"rows": %d,`, wantRows)) {
				t.Errorf("the Parquet manifest: %s", pq)
			}
			t.Logf("prompts %d; infer %+v; filter kept %+v, dropped %+v; trained on %+v; merge %d rows (%d conversations per turn), %d tokens, %d with loss; %d single answers' rows carry ids their text re-tokenizes otherwise",
				prompts, inferred, kept, dropped, cut, len(rows), perTurn, tokens, loss, drifted)
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
