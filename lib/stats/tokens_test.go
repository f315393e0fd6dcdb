package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
)

func idList(from, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(from + i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// The token section counts the rows merge --to tokens would make, the
// conversations that are one row and those that are not (by why), and
// sets the rows against --max-train-tokens and --min-loss-tokens.
func TestTokenSection(t *testing.T) {
	single := func(id string, p, a int) string {
		return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q"}],"output":{"text":"a","finish_reason":"stop","usage":{"prompt_tokens":%d,"completion_tokens":%d},"latency_ms":1,"attempts":1,"sample":0,"prompt_token_ids":%s,"token_ids":%s}}`, id, p, a, idList(1, p), idList(500, a))
	}
	conv := func(id, secondPrompt string) string {
		return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":"q"}],"output":{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"r"},{"role":"assistant","content":"b"}],`+
			`"turns":[{"message":1,"finish_reason":"stop","usage":{"prompt_tokens":2,"completion_tokens":2},"prompt_token_ids":[1,2],"token_ids":[3,4]},{"message":3,"finish_reason":"stop","usage":{"prompt_tokens":5,"completion_tokens":1},"prompt_token_ids":%s,"token_ids":[8]}],`+
			`"finish_reason":"stop","usage":{"prompt_tokens":7,"completion_tokens":3},"latency_ms":1,"attempts":1,"sample":0}}`, id, secondPrompt)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "gen.jsonl")
	lines := []string{single("a", 10, 30), single("b", 50, 60), single("c", 5, 1), conv("whole", "[1,2,3,4,9]"), conv("redone", "[1,2,3,7,9]"),
		`{"id":"plain","messages":[{"role":"user","content":"q"}],"output":{"text":"a","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"latency_ms":1,"attempts":1,"sample":0}}`}
	os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	r := runJSON(t, 0, "--max-train-tokens", "40", "--min-loss-tokens", "3", in)
	tk := r.Tokens
	if tk == nil {
		t.Fatal("no token section")
	}
	// Rows: 40, 110, 6; the consistent conversation's one of 6 tokens
	// (loss 3); the other's two, of 4 and 6 tokens (loss 3).
	if tk.Records != 5 || tk.Rows != 6 || tk.Events != 7 || tk.WholeConversations != 1 || tk.PerTurnConversations != 1 {
		t.Errorf("counts %+v", tk)
	}
	if len(tk.NotPrefixConsistent) != 1 || tk.NotPrefixConsistent[0] != (Count{Name: "answer re-tokenized", Count: 1}) {
		t.Errorf("not prefix-consistent %+v", tk.NotPrefixConsistent)
	}
	if tk.RowTokens.Count != 6 || tk.RowTokens.Max != 110 || tk.LossTokens.Count != 5 || tk.LossTokens.Max != 60 {
		t.Errorf("distributions: rows %+v, loss %+v", tk.RowTokens.Summary, tk.LossTokens.Summary)
	}
	if tk.RowsTooLong != 1 || tk.RecordsTooLong != 1 || tk.RecordsFewLoss != 1 {
		t.Errorf("against the window: %d rows (%d records) too long, %d records with too few loss tokens", tk.RowsTooLong, tk.RecordsTooLong, tk.RecordsFewLoss)
	}
	plain := filepath.Join(dir, "plain.jsonl")
	os.WriteFile(plain, []byte(lines[len(lines)-1]+"\n"), 0o644)
	if r := runJSON(t, 0, plain); r.Tokens != nil {
		t.Errorf("a token section without ids: %+v", r.Tokens)
	}
}

// --tokens re-tokenizes answers through their own server: llmsim's word
// tokenizer gives back the ids generated but for the answers that wrote a
// drift word with a full stop, whose merge it lacks.
func TestTokenDrift(t *testing.T) {
	f, err := llmsim.Start(context.Background(), llmsim.Config{Instant: true, ChatTemplate: "chatml", Seed: 3}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	url := f.URLs()[0]
	dir := t.TempDir()
	var lines []string
	wantDiff := 0
	for i := 0; i < 40; i++ {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"question %d"}],"max_tokens":60,"return_token_ids":true}`, i)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI(url + "/v1/chat/completions")
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
		if err := fasthttp.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("%v %d", err, resp.StatusCode())
		}
		var a struct {
			Choices []struct {
				Message        struct{ Content string }
				FinishReason   string  `json:"finish_reason"`
				PromptTokenIDs []int32 `json:"prompt_token_ids"`
				TokenIDs       []int32 `json:"token_ids"`
			}
		}
		json.Unmarshal(resp.Body(), &a)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		c := a.Choices[0]
		text, _ := json.Marshal(c.Message.Content)
		p, _ := json.Marshal(c.PromptTokenIDs)
		ids, _ := json.Marshal(c.TokenIDs)
		lines = append(lines, fmt.Sprintf(`{"id":"d%d","messages":[{"role":"user","content":"question %d"}],"output":{"text":%s,"finish_reason":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d},"endpoint":%q,"latency_ms":1,"attempts":1,"sample":0,"prompt_token_ids":%s,"token_ids":%s,"served_by":{"model":"m","server":"sglang"}}}`,
			i, i, text, c.FinishReason, len(c.PromptTokenIDs), len(c.TokenIDs), url, p, ids))
		for _, w := range llmsim.DriftWords {
			if strings.Contains(c.Message.Content, " "+w+".") {
				wantDiff++
				break
			}
		}
	}
	in := filepath.Join(dir, "gen.jsonl")
	os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	d := runJSON(t, 0, "--tokens", "--tokens-sample", "100", in).Tokens.Drift
	if d == nil || d.Sampled != 40 || int(d.Different) != wantDiff || d.Same != 40-int64(wantDiff) || wantDiff == 0 {
		t.Fatalf("drift %+v; want %d of 40 different", d, wantDiff)
	}
	if len(d.Examples) != min(wantDiff, 5) || d.Examples[0].Retokenized <= d.Examples[0].Generated {
		t.Errorf("examples %+v", d.Examples)
	}
	// --tokens-sample bounds the answers asked about.
	if d := runJSON(t, 0, "--tokens", "--tokens-sample", "7", in).Tokens.Drift; d.Sampled != 7 {
		t.Errorf("sampled %d, want 7", d.Sampled)
	}
}
