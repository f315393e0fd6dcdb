package infer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/record"
)

// tokenRecord is what a test reads of a generation record's token ids.
type tokenRecord struct {
	ID     string `json:"id"`
	Output struct {
		Text           string           `json:"text"`
		Usage          record.Usage     `json:"usage"`
		PromptTokenIDs []int32          `json:"prompt_token_ids"`
		TokenIDs       []int32          `json:"token_ids"`
		ServedBy       *record.ServedBy `json:"served_by"`
		Messages       []record.Message `json:"messages"`
		Turns          []struct {
			Message        int              `json:"message"`
			Usage          record.Usage     `json:"usage"`
			PromptTokenIDs []int32          `json:"prompt_token_ids"`
			TokenIDs       []int32          `json:"token_ids"`
			ServedBy       *record.ServedBy `json:"served_by"`
		} `json:"turns"`
	} `json:"output"`
	Error *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"error"`
}

func readTokenRecords(t *testing.T, path string) []tokenRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []tokenRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r tokenRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
	}
	return out
}

// simTokenize asks a simulated endpoint's own tokenizer route for the ids
// of a body, as a client would.
func simTokenize(t *testing.T, url, path, body string) []int32 {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url + path)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	if err := fasthttp.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("POST %s: %v %d %s", path, err, resp.StatusCode(), resp.Body())
	}
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(resp.Body(), &out); err != nil {
		t.Fatal(err)
	}
	return out.Tokens
}

// Every server kind that returns ids gives them, each in its own shape:
// as many as the usage counts, the prompt's the ids its own tokenizer
// gives the prompt (the chat template applied), and the same ids for the
// same prompt whatever the kind; the answer's the ids of its text where
// the text has no drift word; served_by names the kind and its version.
func TestTokenIDsPerServerKind(t *testing.T) {
	cases := []struct {
		flavor           llmsim.Flavor
		api              string
		server, version  string
		templateExposed  bool
		completionPrompt bool
	}{
		{llmsim.FlavorSGLang, "chat", "sglang", "0.5.4", true, false},
		{llmsim.FlavorSGLang, "completions", "sglang", "0.5.4", true, true},
		{llmsim.FlavorSGLang, "generate", "sglang", "0.5.4", true, true},
		{llmsim.FlavorVLLM, "chat", "vllm", "0.11.0", false, false},
		{llmsim.FlavorVLLM, "completions", "vllm", "0.11.0", false, true},
		{llmsim.FlavorVLLM0100, "chat", "vllm", "0.10.0", false, false},
		{llmsim.FlavorLlamaCpp, "chat", "llamacpp", "b6097-9515c613", true, false},
		{llmsim.FlavorLlamaCpp, "completions", "llamacpp", "b6097-9515c613", true, true},
	}
	chatPrompts := map[string][]int32{}
	for _, c := range cases {
		t.Run(string(c.flavor)+"/"+c.api, func(t *testing.T) {
			s := newSetup(t, llmsim.Config{Instant: true, Flavor: c.flavor, ChatTemplate: "chatml"}, 2, promptSet{n: 12, completion: c.completionPrompt})
			res := runWant(t, 0, s.args("--token-ids", "--api", c.api, "--max-tokens", "40")...)
			if !strings.Contains(res.stderr, "token ids: 12 answers with them, 0 failed") {
				t.Errorf("summary: %s", res.stderr)
			}
			recs := readTokenRecords(t, s.out)
			if len(recs) != 12 {
				t.Fatalf("%d records, want 12", len(recs))
			}
			url := s.fleet.URLs()[0]
			for _, r := range recs {
				o := r.Output
				if len(o.PromptTokenIDs) != o.Usage.PromptTokens || len(o.TokenIDs) != o.Usage.CompletionTokens || len(o.TokenIDs) == 0 {
					t.Fatalf("%s: %d prompt ids for %d tokens, %d answer ids for %d", r.ID, len(o.PromptTokenIDs), o.Usage.PromptTokens, len(o.TokenIDs), o.Usage.CompletionTokens)
				}
				if sb := o.ServedBy; sb == nil || sb.Server != c.server || sb.Version != c.version || sb.Model != llmsim.DefaultModelName || (sb.ChatTemplateHash != "") != c.templateExposed {
					t.Fatalf("%s: served_by %+v", r.ID, o.ServedBy)
				}
				if !c.completionPrompt {
					if prev, ok := chatPrompts[r.ID]; ok && !slices.Equal(prev, o.PromptTokenIDs) {
						t.Fatalf("%s: prompt ids differ between server kinds:\n%v\n%v", r.ID, prev, o.PromptTokenIDs)
					}
					chatPrompts[r.ID] = o.PromptTokenIDs
				}
				if !hasDriftWord(o.Text) {
					text, _ := json.Marshal(o.Text)
					got := simAnyTokenize(t, url, c.flavor, string(text))
					if !slices.Equal(got, o.TokenIDs) {
						t.Fatalf("%s: the answer's text re-tokenizes to other ids than it was generated as, with no drift word in %q", r.ID, o.Text)
					}
				}
			}
		})
	}
}

// simAnyTokenize is the ids a non-SGLang flavour's /tokenize gives a
// JSON text.
func simAnyTokenize(t *testing.T, url string, fl llmsim.Flavor, text string) []int32 {
	switch fl {
	case llmsim.FlavorLlamaCpp:
		return simTokenize(t, url, "/tokenize", `{"content":`+text+`}`)
	case llmsim.FlavorSGLang:
		return simTokenize(t, url, "/v1/tokenize", `{"prompt":`+text+`}`)
	}
	return simTokenize(t, url, "/tokenize", `{"prompt":`+text+`}`)
}

// hasDriftWord tells whether a text holds a word llmsim's tokenizer has
// no merge of its full stop for.
func hasDriftWord(text string) bool {
	for _, w := range llmsim.DriftWords {
		if strings.Contains(text, " "+w+".") {
			return true
		}
	}
	return false
}

// A server that returns no token ids is refused before anything is
// written, the message naming what it lacks.
func TestTokenIDsRefusedWithoutThem(t *testing.T) {
	for _, c := range []struct {
		flavor llmsim.Flavor
		want   string
	}{
		{llmsim.FlavorOllama, "Ollama 0.6.5 returns no token ids"},
		{llmsim.FlavorOpenAI, "gateway returns no token ids"},
	} {
		t.Run(string(c.flavor), func(t *testing.T) {
			cfg := llmsim.Config{Instant: true, Flavor: c.flavor}
			if c.flavor == llmsim.FlavorOpenAI {
				cfg.APIKey = "k"
			}
			s := newSetup(t, cfg, 1, promptSet{n: 3})
			args := s.args("--token-ids")
			if cfg.APIKey != "" {
				args = append(args, "--api-key", "k", "--model", llmsim.DefaultModelName)
			}
			res := runWant(t, 2, args...)
			if !strings.Contains(res.stderr, c.want) {
				t.Fatalf("stderr does not say %q:\n%s", c.want, res.stderr)
			}
			if _, err := os.Stat(s.out); !os.IsNotExist(err) {
				t.Fatalf("-o was created (%v)", err)
			}
		})
	}
}

// The first answer of an endpoint that comes without ids stops the run;
// a server that stops sending them later fails those requests as
// no_token_ids, every prompt accounted for.
func TestTokenIDsCheckedAndLost(t *testing.T) {
	t.Run("first answer", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 4})
		s.fleet.Endpoint(0).StopTokenIDsAfter(0)
		res := runWant(t, 2, s.args("--token-ids", "--concurrency", "1")...)
		if !strings.Contains(res.stderr, "answered its first request without whole token ids") {
			t.Fatalf("stderr:\n%s", res.stderr)
		}
	})
	t.Run("mid-run", func(t *testing.T) {
		s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 10})
		s.fleet.Endpoint(0).StopTokenIDsAfter(6)
		res := runWant(t, 3, s.args("--token-ids", "--concurrency", "1", "--max-tokens", "20")...)
		acc := s.check(t, 1)
		if acc.ok != 6 || acc.failed != 4 {
			t.Fatalf("%d ok, %d failed; want 6 and 4\n%s", acc.ok, acc.failed, res.stderr)
		}
		for _, r := range readTokenRecords(t, s.errs()) {
			if r.Error == nil || r.Error.Reason != record.ReasonNoTokenIDs {
				t.Fatalf("error record %s: %+v", r.ID, r.Error)
			}
		}
		for _, r := range readTokenRecords(t, s.out) {
			if len(r.Output.TokenIDs) != r.Output.Usage.CompletionTokens {
				t.Fatalf("%s kept without its ids", r.ID)
			}
		}
		if !strings.Contains(res.stderr, "token ids: 6 answers with them, 4 failed without them (no_token_ids)") {
			t.Errorf("summary:\n%s", res.stderr)
		}
	})
	// llama.cpp's ids come from /completion, which parses no tool calls: a
	// request with tools cannot have them, and says why.
	t.Run("llama.cpp and tools", func(t *testing.T) {
		tools := func(i int) string {
			if i%2 == 0 {
				return ""
			}
			return `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
		}
		s := newSetup(t, llmsim.Config{Instant: true, Flavor: llmsim.FlavorLlamaCpp}, 1, promptSet{n: 6, extra: tools})
		res := runWant(t, 3, s.args("--token-ids", "--concurrency", "1")...)
		// Each prompt once, the ones with tools as errors (llama.cpp answers
		// the ids it is sent, so the answers start with their digest, not
		// the messages').
		seen := map[string]bool{}
		for _, r := range readTokenRecords(t, s.out) {
			if seen[r.ID] || strings.Contains(s.lines[r.ID], `"tools"`) || len(r.Output.TokenIDs) == 0 {
				t.Fatalf("answer %s: twice, with tools, or without ids", r.ID)
			}
			seen[r.ID] = true
		}
		for _, r := range readTokenRecords(t, s.errs()) {
			if seen[r.ID] || r.Error.Reason != record.ReasonNoTokenIDs || !strings.Contains(r.Error.Message, "does not parse tool calls") {
				t.Fatalf("%s: %+v", r.ID, r.Error)
			}
			seen[r.ID] = true
		}
		if len(seen) != 6 || !strings.Contains(res.stderr, "token ids: 3 answers with them, 3 failed without them") {
			t.Fatalf("%d prompts accounted for\n%s", len(seen), res.stderr)
		}
	})
}

// Every regenerated turn carries its ids; with a template that keeps
// the history as generated, each turn's prompt begins with the turn
// before's prompt and answer.
func TestTokenIDsRegenerate(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "conv.jsonl")
	var b strings.Builder
	for i := 0; i < 6; i++ {
		fmt.Fprintf(&b, `{"id":"c%d","messages":[{"role":"user","content":"first question %d"},{"role":"assistant","content":"old"},{"role":"user","content":"second question"},{"role":"assistant","content":"old"}]}`+"\n", i, i)
	}
	os.WriteFile(in, []byte(b.String()), 0o644)
	f := startFleet(t, llmsim.Config{Instant: true, ChatTemplate: "chatml"}, 1)
	out := filepath.Join(dir, "regen.jsonl")
	runWant(t, 0, append([]string{"-o", out, in, "-e", f.URLs()[0], "--regenerate", "--token-ids", "--max-tokens", "30"}, fastFlags...)...)
	recs := readTokenRecords(t, out)
	if len(recs) != 6 {
		t.Fatalf("%d records", len(recs))
	}
	consistent := 0
	for _, r := range recs {
		o := r.Output
		if len(o.Turns) != 2 || o.ServedBy == nil || o.ServedBy.Server != "sglang" {
			t.Fatalf("%s: %d turns, served_by %+v", r.ID, len(o.Turns), o.ServedBy)
		}
		for k, tu := range o.Turns {
			if len(tu.PromptTokenIDs) != tu.Usage.PromptTokens || len(tu.TokenIDs) != tu.Usage.CompletionTokens || tu.ServedBy != nil {
				t.Fatalf("%s turn %d: %d/%d prompt ids, %d/%d answer ids, served_by %+v", r.ID, k, len(tu.PromptTokenIDs), tu.Usage.PromptTokens, len(tu.TokenIDs), tu.Usage.CompletionTokens, tu.ServedBy)
			}
		}
		first, second := o.Turns[0], o.Turns[1]
		prefix := append(slices.Clone(first.PromptTokenIDs), first.TokenIDs...)
		begins := len(second.PromptTokenIDs) > len(prefix) && slices.Equal(second.PromptTokenIDs[:len(prefix)], prefix)
		if drift := hasDriftWord(o.Messages[first.Message].Content); begins == drift {
			t.Fatalf("%s: the second prompt begins with the first prompt and answer: %v, but the answer has a drift word: %v", r.ID, begins, drift)
		}
		if begins {
			consistent++
		}
	}
	if consistent == 0 {
		t.Fatal("no conversation was prefix-consistent")
	}
}

// An endpoint that joins a --token-ids run while the others are busy gets
// a burst of first requests at once, more than its control connections:
// the server is asked what it is once, by one of them, and the burst
// waits for the verdict. (It was asked by every request at once; those
// refused a connection took it for a gateway and stopped the run.)
func TestTokenIDsEndpointJoiningABusyRun(t *testing.T) {
	s := newSetup(t, llmsim.Config{Instant: true}, 2, promptSet{n: 0})
	late := s.fleet.Endpoint(1)
	late.SetHealthy(false)
	// A pipe of the system's, so that a write fails (EPIPE) rather than
	// blocking once infer has stopped reading.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	args := append([]string{"-o", s.out, "-e", endpointsFlag(s.fleet.URLs()), "--token-ids",
		"--concurrency", "64", "--max-tokens", "8", "--wait-ready", "20s"}, fastFlags...)
	run := startInferPiped(t, append(args, "-"), pr)
	pr.Close() // infer holds its own
	var sent bytes.Buffer
	write := func(from, to int) {
		t.Helper()
		var b bytes.Buffer
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, `{"id":"p%05d","messages":[{"role":"user","content":"question %d"}]}`+"\n", i, i)
		}
		sent.Write(b.Bytes())
		if _, err := pw.Write(b.Bytes()); err != nil {
			t.Fatalf("writing prompts: %v\n%s", err, run.stderr.String())
		}
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) || run.exited() {
				t.Fatalf("%s: not within 60 s\n%s", what, run.stderr.String())
			}
		}
	}
	write(0, 50)
	until("the first endpoint answers the first 50", func() bool { return s.fleet.Endpoint(0).Stats().Completed >= 50 })
	late.SetHealthy(true)
	// Prompts in bursts until the late endpoint has taken its share.
	n := 50
	until("the late endpoint answers", func() bool {
		if late.Stats().Completed >= 200 {
			return true
		}
		if n < 40000 {
			write(n, n+400)
			n += 400
		}
		return false
	})
	pw.Close()
	if code := run.wait(t, 120*time.Second); code != 0 {
		t.Fatalf("exit %d; want 0\n%s", code, run.stderr.String())
	}
	seen := map[string]bool{}
	for _, r := range readTokenRecords(t, s.out) {
		if seen[r.ID] || len(r.Output.TokenIDs) != r.Output.Usage.CompletionTokens || len(r.Output.PromptTokenIDs) == 0 {
			t.Fatalf("answer %s: twice, or without its ids", r.ID)
		}
		seen[r.ID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d answers of %d prompts\n%s", len(seen), n, run.stderr.String())
	}
	if errs, _ := os.ReadFile(s.errs()); len(errs) != 0 {
		t.Fatalf("error records:\n%s", errs)
	}
}
