package pipelines_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// tokenRowOf is a training row as merge --to tokens writes it.
type tokenRowOf struct {
	ID       json.RawMessage `json:"id"`
	Sample   int             `json:"sample"`
	Turn     *int            `json:"turn"`
	InputIDs []int32         `json:"input_ids"`
	LossMask []int32         `json:"loss_mask"`
}

func (r tokenRowOf) key() string {
	turn := "whole"
	if r.Turn != nil {
		turn = fmt.Sprint(*r.Turn)
	}
	return fmt.Sprintf("%s/%d/%s", r.ID, r.Sample, turn)
}

// readRows reads a rows file by key, failing on a repeated key.
func readRows(t *testing.T, path string) map[string]tokenRowOf {
	t.Helper()
	rows := map[string]tokenRowOf{}
	for _, r := range readJSONL[tokenRowOf](t, path) {
		if _, dup := rows[r.key()]; dup {
			t.Fatalf("%s: row %s twice", path, r.key())
		}
		rows[r.key()] = r
	}
	return rows
}

// parityReport is stats --json's parity section.
type parityReport struct {
	Parity *struct {
		Records          int `json:"records"`
		RecordsIdentical int `json:"records_identical"`
		Events           int `json:"events"`
		EventsIdentical  int `json:"events_identical"`
		Differing        []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"differing"`
		NotChecked []any `json:"not_checked"`
	} `json:"parity"`
}

func parityOf(t *testing.T, dir string, tok string, files ...string) parityReport {
	t.Helper()
	var p parityReport
	out := runStdout(t, dir, "stats", append([]string{"--json", "--tokenizer", tok}, files...)...)
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Parity == nil {
		t.Fatalf("stats --json --tokenizer: %v\n%.500s", err, out)
	}
	return p
}

// A model's own tokenizer and chat template, end to end, from real
// datasets to the training file. Real conversations (FastChat, glaive's
// with tools, Alpaca, MT-Bench) go through extract and dedup to llmsim
// serving the real Qwen3 and DeepSeek-V3 vocabularies and templates
// (--tokenizer), as single answers and, with --regenerate, whole
// conversations. On the flavour that returns ids (SGLang), stats
// --tokenizer finds every record's ids identical to the local rendering;
// the same answers from the flavour that returns none (Ollama) become,
// with merge --tokenizer, exactly the rows the server's ids give (those
// whose answer the template leaves out are rejected, counted by reason,
// never trained on short). A server rendering with a drifted template is
// caught on every record, with its cause, and filter --tokenizer drops
// them all. Every prompt is accounted for at each stage.
func TestTokenizerReachesTraining(t *testing.T) {
	if testing.Short() && !testbin.IsLong() {
		t.Skip("-short: TOKENMILL_TEST_LONG=1 runs it anyway")
	}
	fastchat, glaive := realDataFile(t, "fastchat_dummy_conversation.json"), realDataFile(t, "glaive_toolcall_en_demo.json")
	alpaca, mtbench := realDataFile(t, "alpaca_en_demo.json"), realDataFile(t, "mt_bench_question.jsonl")
	dir := t.TempDir()
	run(t, dir, 0, "extract", "-o", "extracted.jsonl", fastchat, glaive, alpaca, mtbench)
	run(t, dir, 0, "dedup", "-o", "prompts.jsonl", "extracted.jsonl")
	run(t, dir, 0, "extract", "--turns", "all", "-o", "conv-extracted.jsonl", fastchat, glaive)
	run(t, dir, 0, "dedup", "-o", "convs.jsonl", "conv-extracted.jsonl")
	prompts, convs := len(readAny(t, filepath.Join(dir, "prompts.jsonl"))), len(readAny(t, filepath.Join(dir, "convs.jsonl")))
	if prompts < 1000 || convs < 500 {
		t.Fatalf("%d prompts, %d conversations: the real datasets give more", prompts, convs)
	}

	for _, tc := range []struct {
		model string
		// dropsCalls: the template leaves out the tool calls of an answer
		// with content (DeepSeek-V3's), so those answers are rejected.
		dropsCalls bool
	}{
		{model: "qwen3"},
		{model: "deepseek_v3", dropsCalls: true},
	} {
		t.Run(tc.model, func(t *testing.T) {
			tok := testbin.Tokenizers(t, tc.model)
			sim := []string{"--instant", "--seed", "3", "--tokenizer", tok, "--tool-call-rate", "0.4"}
			sglang := startFleet(t, 2, sim...)
			ollama := startFleet(t, 1, append(sim, "--flavor", "ollama")...)
			llamacpp := startFleet(t, 1, append(sim, "--flavor", "llamacpp")...)
			for _, job := range []struct {
				name, input string
				n           int
				args        []string
			}{
				{"single answers", "prompts.jsonl", prompts, nil},
				{"regenerated conversations", "convs.jsonl", convs, []string{"--regenerate"}},
			} {
				t.Run(job.name, func(t *testing.T) {
					d := t.TempDir()
					for _, f := range []string{"prompts.jsonl", "convs.jsonl"} {
						copyFile(t, filepath.Join(dir, f), filepath.Join(d, f))
					}
					common := append([]string{"--max-tokens", "120", "--progress", "0"}, job.args...)
					run(t, d, 0, "infer", append([]string{"-e", sglang, "--token-ids", "-o", "ids.jsonl", job.input}, common...)...)
					run(t, d, 0, "infer", append([]string{"-e", ollama, "-o", "text.jsonl", job.input}, common...)...)
					for _, f := range []string{"ids.jsonl", "text.jsonl"} {
						if n := len(readAny(t, filepath.Join(d, f))); n != job.n {
							t.Fatalf("%s: %d records for %d prompts", f, n, job.n)
						}
					}

					// Parity: the server's ids are the local rendering's.
					p := parityOf(t, d, tok, "ids.jsonl").Parity
					differing := 0
					for _, c := range p.Differing {
						differing += c.Count
						if c.Name != "answer_not_rendered" || !tc.dropsCalls {
							t.Errorf("events differing as %s: %d", c.Name, c.Count)
						}
					}
					if p.Records != job.n || p.EventsIdentical+differing != p.Events || len(p.NotChecked) > 0 || !tc.dropsCalls && p.RecordsIdentical != job.n {
						t.Fatalf("parity %+v for %d records", *p, job.n)
					}

					// Rows from the server's ids and rows rebuilt from the text
					// answers of a server without ids: the same, row for row.
					idsSummary := run(t, d, 0, "merge", "--to", "tokens", "-o", "rows-ids.jsonl", "ids.jsonl")
					code := 0
					if tc.dropsCalls {
						code = 3
					}
					textSummary := run(t, d, code, "merge", "--to", "tokens", "--tokenizer", tok, "--rejects", "rejects.jsonl", "-o", "rows-text.jsonl", "text.jsonl")
					fromIDs, fromText := readRows(t, filepath.Join(d, "rows-ids.jsonl")), readRows(t, filepath.Join(d, "rows-text.jsonl"))
					rejected := 0
					if tc.dropsCalls {
						rejected = len(readAny(t, filepath.Join(d, "rejects.jsonl")))
						if rejected == 0 || summaryInt(t, textSummary, "answer_not_rendered") != rejected {
							t.Errorf("%d rejects; merge: %s", rejected, textSummary)
						}
					}
					// Every answer the model ended ends its row with the
					// end-of-turn id, trained on; none cut at max_tokens does.
					if job.args == nil {
						eot := map[string]int32{"qwen3": 151645, "deepseek_v3": 1}[tc.model]
						ended := 0
						for _, g := range readJSONL[struct {
							Output struct {
								FinishReason string `json:"finish_reason"`
							} `json:"output"`
						}](t, filepath.Join(d, "ids.jsonl")) {
							if g.Output.FinishReason == "stop" || g.Output.FinishReason == "tool_calls" {
								ended++
							}
						}
						endsWith := 0
						for k, r := range fromIDs {
							if n := len(r.InputIDs); r.InputIDs[n-1] == eot {
								endsWith++
								if r.LossMask[n-1] != 1 {
									t.Errorf("row %s: its end-of-turn id has no loss", k)
								}
							}
						}
						if ended == 0 || endsWith != ended {
							t.Errorf("%d rows end with the end-of-turn id %d, %d answers ended on their own", endsWith, eot, ended)
						}
					}
					if job.args == nil {
						sameRowsFromLlamaCpp(t, d, tok, llamacpp, job.input, common, fromIDs)
					}
					same := 0
					for k, r := range fromText {
						ids, ok := fromIDs[k]
						if !ok || !slices.Equal(ids.InputIDs, r.InputIDs) || !slices.Equal(ids.LossMask, r.LossMask) {
							t.Errorf("row %s rebuilt with the tokenizer differs from the server's", k)
							continue
						}
						same++
					}
					wantRecords := summaryInt(t, idsSummary, "unique out")
					if got := summaryInt(t, textSummary, "unique out") + rejected; got != wantRecords {
						t.Errorf("merge --tokenizer wrote %d records and rejected %d, of the %d merge writes from ids", got-rejected, rejected, wantRecords)
					}
					if !tc.dropsCalls && (same != len(fromIDs) || len(fromText) != len(fromIDs)) {
						t.Fatalf("%d of %d rows rebuilt equal the server's (%d rows from ids)", same, len(fromText), len(fromIDs))
					}
					if !strings.Contains(textSummary, "events rendered with the tokenizer") && len(fromText) > 0 {
						t.Errorf("merge does not say it rendered: %s", textSummary)
					}
					t.Logf("%d records; parity %d of %d events identical; %d rows from ids, %d rebuilt (all equal), %d answers rejected as not rendered",
						job.n, p.EventsIdentical, p.Events, len(fromIDs), same, rejected)
				})
			}
		})
	}

	// Context fitting with the model's tokenizer: every prompt counted
	// exactly as the server counts it, so none is sent to be refused and
	// none that fits is held back; each prompt is answered or filed
	// prompt_too_long, counted.
	t.Run("context fitting", func(t *testing.T) {
		tok := testbin.Tokenizers(t, "qwen3")
		small := startFleet(t, 1, "--instant", "--tokenizer", tok, "--context-length", "400")
		d := t.TempDir()
		copyFile(t, filepath.Join(dir, "prompts.jsonl"), filepath.Join(d, "prompts.jsonl"))
		summary := run(t, d, 3, "infer", "-e", small, "--tokenizer", tok, "--max-tokens", "64", "--min-answer-tokens", "16", "--progress", "0", "-o", "gen.jsonl", "prompts.jsonl")
		answers, errs := readAny(t, filepath.Join(d, "gen.jsonl")), readJSONL[struct {
			Error struct {
				Status  int    `json:"status"`
				Message string `json:"message"`
			} `json:"error"`
		}](t, filepath.Join(d, "gen.errors.jsonl"))
		if len(answers)+len(errs) != prompts || len(answers) == 0 || len(errs) == 0 {
			t.Fatalf("%d answers and %d errors for %d prompts\n%s", len(answers), len(errs), prompts, summary)
		}
		for _, e := range errs {
			if e.Error.Status != 0 || !strings.Contains(e.Error.Message, "(counted)") {
				t.Fatalf("an error other than a prompt counted too long: %+v", e.Error)
			}
		}
		gens := readJSONL[struct {
			Output struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
				FinishReason string `json:"finish_reason"`
			} `json:"output"`
		}](t, filepath.Join(d, "gen.jsonl"))
		for _, g := range gens {
			if g.Output.Usage.PromptTokens+16 > 400 {
				t.Fatalf("a prompt of %d tokens was sent to a 400-token context", g.Output.Usage.PromptTokens)
			}
		}
		t.Logf("%d answered, %d counted too long, no refusal", len(answers), len(errs))
	})

	// A server with another template: every record is found, by cause,
	// and filter drops them all.
	t.Run("drift", func(t *testing.T) {
		tok := testbin.Tokenizers(t, "qwen3")
		drifted := startFleet(t, 1, "--instant", "--tokenizer", tok, "--template-drift")
		d := t.TempDir()
		copyFile(t, filepath.Join(dir, "prompts.jsonl"), filepath.Join(d, "prompts.jsonl"))
		run(t, d, 0, "infer", "-e", drifted, "--token-ids", "--max-tokens", "40", "--progress", "0", "-o", "gen.jsonl", "prompts.jsonl")
		p := parityOf(t, d, tok, "gen.jsonl").Parity
		if p.Records != prompts || p.RecordsIdentical != 0 || len(p.Differing) != 1 || p.Differing[0].Name != "template" || p.Differing[0].Count != prompts {
			t.Fatalf("parity on a drifted server: %+v, want every one of %d records differing by template", *p, prompts)
		}
		summary := run(t, d, 0, "filter", "--checks", "empty", "--tokenizer", tok, "--rejects", "unfit.jsonl", "-o", "fit.jsonl", "gen.jsonl")
		if n := len(readAny(t, filepath.Join(d, "unfit.jsonl"))); n != prompts || summaryInt(t, summary, "token_mismatch") != prompts || len(readAny(t, filepath.Join(d, "fit.jsonl"))) != 0 {
			t.Fatalf("filter dropped %d of %d: %s", n, prompts, summary)
		}
		if unfit := readFile(t, filepath.Join(d, "unfit.jsonl")); !strings.Contains(unfit, `prompt id 1 differs (template)`) || !strings.Contains(unfit, "You are a helpful assistant.") {
			t.Errorf("the rejects do not say where and why: %.400s", unfit)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sameRowsFromLlamaCpp: the same prompts answered by llama.cpp's flavour
// with --token-ids (the prompt's ids from /apply-template and /tokenize)
// give, through merge, rows whose prompt part is the SGLang flavour's,
// row for row, whose ids the model's own tokenizer and template give (the
// parity above). The answers differ (llama.cpp's come from its
// /completion route, which llmsim answers otherwise), yet each record's
// ids, prompt and answer, are the model's own rendering of it (stats
// --tokenizer). The records with tools are its errors, each once:
// no_token_ids (its ids come only from /completion, which parses no tool
// calls) or tools_unsupported (a template its /props says renders none).
func sameRowsFromLlamaCpp(t *testing.T, d, tok, endpoint, input string, common []string, want map[string]tokenRowOf) {
	t.Helper()
	withTools := 0
	for _, p := range readJSONL[struct {
		Tools json.RawMessage `json:"tools"`
	}](t, filepath.Join(d, input)) {
		if len(p.Tools) > 0 && string(p.Tools) != "null" {
			withTools++
		}
	}
	code := 0
	if withTools > 0 {
		code = 3
	}
	run(t, d, code, "infer", append([]string{"-e", endpoint, "--token-ids", "-o", "llamacpp.jsonl", input}, common...)...)
	reasons := map[string]int{}
	for _, e := range readJSONL[struct {
		Error struct {
			Reason string `json:"reason"`
		} `json:"error"`
	}](t, filepath.Join(d, "llamacpp.errors.jsonl")) {
		reasons[e.Error.Reason]++
	}
	if reasons["no_token_ids"]+reasons["tools_unsupported"] != withTools || len(reasons) > 1 {
		t.Errorf("llama.cpp's errors %v, want the %d records with tools, for one reason", reasons, withTools)
	}
	written := len(readAny(t, filepath.Join(d, "llamacpp.jsonl")))
	if p := parityOf(t, d, tok, "llamacpp.jsonl").Parity; p.Records != written || p.RecordsIdentical != written || len(p.NotChecked) > 0 {
		t.Errorf("parity of llama.cpp's %d records: %+v", written, *p)
	}
	run(t, d, 0, "merge", "--to", "tokens", "-o", "rows-llamacpp.jsonl", "llamacpp.jsonl")
	got := readRows(t, filepath.Join(d, "rows-llamacpp.jsonl"))
	if len(got) != written || len(got)+withTools != len(want) {
		t.Fatalf("%d rows from %d llama.cpp records and %d records with tools, %d rows from SGLang's", len(got), written, withTools, len(want))
	}
	prompt := func(r tokenRowOf) []int32 { return r.InputIDs[:slices.Index(r.LossMask, 1)] }
	for k, r := range got {
		w, ok := want[k]
		if !ok || slices.Index(r.LossMask, 1) < 1 || !slices.Equal(prompt(w), prompt(r)) {
			t.Errorf("row %s: its prompt from llama.cpp's ids differs from SGLang's", k)
		}
	}
	t.Logf("llama.cpp: %d records, %d rows with SGLang's prompt ids; errors %v", written, len(got), reasons)
}
