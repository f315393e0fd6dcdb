package tokenizer

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"tokenmill/internal/gguf"
	"tokenmill/internal/llamaserver"
	"tokenmill/internal/testbin"
)

// TestLlamaCppAgreement checks Render and Encode against llama.cpp, an
// implementation of chat templates (its own Jinja engine) and of byte-level
// BPE (its "gpt2" tokenizer with the "qwen2" pre-tokenizer) that nobody
// here wrote, on Qwen3's real vocabulary, merges and chat template,
// carried into a tiny random-weight model the way llama.cpp's converter
// carries them (gguf.ReadBPEVocab).
//
// For every conversation of the real datasets (the reference cases in
// ../shared/data/tokenizers/golden, made from FastChat, glaive with its
// tools, Alpaca and MT-Bench: whole conversations and the prompt of each
// assistant turn; and LLaMA-Factory's v1_sft_demo, read directly; every
// tenth prompt also with chat_template_kwargs enable_thinking false),
// llama-server's POST /apply-template must give Render's text; for every
// rendered prompt and every plain text of the datasets (each message's
// content, each tool call's arguments, each tool list; each of those with
// line breaks again with CRLF line ends; and llamacppProbes), POST
// /tokenize (add_special false, parse_special true) must give Encode's
// ids. It takes about 30 s once the server is up (llama-server analyses
// the template again for every /apply-template). Where
// llama.cpp knowingly differs from Hugging Face the case is counted under
// that divergence's name (llamacppDivergences) and must be explained by
// it exactly; anything else fails.
//
// The server runs with --no-prefill-assistant: by default llama-server
// treats a conversation that ends with an assistant message as a prefill
// (it renders the rest with add_generation_prompt and appends the
// message's text raw), which is a server feature, not rendering; with the
// flag it renders the whole conversation as transformers does.
func TestLlamaCppAgreement(t *testing.T) {
	testbin.Long(t, "a real llama.cpp server")
	if _, err := llamaserver.Find(); err != nil {
		t.Skip(err)
	}
	dir := testbin.Tokenizers(t, "qwen3")
	cases := llamacppCases(t)
	texts := llamacppTexts(cases)
	nData := len(texts)
	for _, text := range texts[:nData] {
		if strings.Contains(text, "\n") {
			texts = append(texts, strings.ReplaceAll(text, "\n", "\r\n"))
		}
	}
	nCRLF := len(texts) - nData
	texts = append(texts, llamacppProbes...)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := gguf.ReadBPEVocab(dir, "qwen2")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	srv := llamaserver.Start(t, llamaserver.Options{
		Model: gguf.Llama{BPE: vocab, Layers: 1, Embedding: 32, FeedForward: 64, Heads: 4, KVHeads: 2},
		Args:  []string{"--no-prefill-assistant"},
	})
	t.Logf("llama-server (build %s) ready in %v, %v after the start of the test", srv.BuildInfo, srv.Ready.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()

	renders := llamacppRenderAll(tok, srv, cases)

	tRender := time.Since(t0)

	// Tokenize every rendered prompt (Render's, Hugging Face's text) and
	// every plain text.
	var inputs []string
	for _, r := range renders {
		if r.err == nil {
			inputs = append(inputs, r.want)
		}
	}
	nPrompts := len(inputs)
	inputs = append(inputs, texts...)
	srvTokenize := func(text string) ([]int, error) {
		var out struct{ Tokens []int }
		err := srv.Call("/tokenize", map[string]any{"content": text, "add_special": false, "parse_special": true}, &out)
		return out.Tokens, err
	}
	toks := make([]llamacppTokenized, len(inputs))
	llamacppEach(len(inputs), func(i int) {
		r := &toks[i]
		r.want = tok.Encode(inputs[i])
		r.got, r.err = srvTokenize(inputs[i])
	})
	t.Logf("compared in %v (rendering %v, tokenizing %v)", time.Since(t0).Round(time.Millisecond),
		tRender.Round(time.Millisecond), (time.Since(t0) - tRender).Round(time.Millisecond))

	// Count, and explain each difference or fail.
	known, sameText, sameIDs, failed := llamacppCompare(t, tok, cases, renders, inputs, nPrompts, toks, srvTokenize)
	t.Logf("templates: %d cases, %d identical texts", len(cases), sameText)
	t.Logf("tokens: %d rendered prompts, %d identical; %d plain texts (%d of the datasets, %d of those with CRLF line ends, %d probes), %d identical",
		nPrompts, sameIDs[0], len(texts), nData, nCRLF, len(llamacppProbes), sameIDs[1])
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Logf("known divergence %q: %d cases (%s)", name, known[name], llamacppDivergences[name])
	}
	if failed > 0 {
		t.Fatalf("%d comparisons differ with no known reason (first 5 above)", failed)
	}
	if len(cases) < 5000 || nData < 3000 {
		t.Fatalf("only %d cases and %d texts: the datasets are not all there", len(cases), nData)
	}
	if known[llamacppNoNFC] == 0 {
		t.Errorf("no probe showed %q: the probes no longer reach it", llamacppNoNFC)
	}
}

// llamacppRendered is one case rendered by Render (want) and llama.cpp.
type llamacppRendered struct {
	want, got string
	err       error
}

// llamacppTokenized is one text's ids by Encode (want) and llama.cpp.
type llamacppTokenized struct {
	want, got []int
	err       error
}

// llamacppCompare counts the identical renders and ids, and explains
// each difference by a known divergence or reports it (the first five).
// inputs are the rendered prompts (nPrompts of them), then plain texts;
// sameIDs counts the identical ids of each.
func llamacppCompare(t *testing.T, tok *Tokenizer, cases []llamacppCase, renders []llamacppRendered, inputs []string, nPrompts int,
	toks []llamacppTokenized, srvTokenize func(string) ([]int, error)) (known map[string]int, sameText int, sameIDs [2]int, failed int) {
	t.Helper()
	known = map[string]int{}
	report := func(format string, args ...any) {
		if failed++; failed <= 5 {
			t.Errorf(format, args...)
		}
	}
	for i, r := range renders {
		c := cases[i]
		switch {
		case r.err != nil:
			report("%s: %v", c.ID, r.err)
		case r.got == r.want:
			sameText++
		default:
			name := llamacppTemplateDivergence(tok, c, r.want, r.got)
			if name == "" {
				at := llamacppDiffAt(r.got, r.want)
				report("%s: llama.cpp renders differently at byte %d:\n llama.cpp %q\n Render    %q", c.ID, at, llamacppAround(r.got, at), llamacppAround(r.want, at))
				continue
			}
			known[name]++
		}
	}
	for i, r := range toks {
		kind := 0
		if i >= nPrompts {
			kind = 1
		}
		switch {
		case r.err != nil:
			report("tokenizing %.80q: %v", inputs[i], r.err)
		case slices.Equal(r.got, r.want):
			sameIDs[kind]++
		default:
			name := llamacppTokenDivergence(inputs[i], r.want, srvTokenize)
			if name == "" {
				at := 0
				for at < min(len(r.got), len(r.want)) && r.got[at] == r.want[at] {
					at++
				}
				report("tokenizing %.200q: llama.cpp's ids differ at %d: llama.cpp %v, Encode %v (%q vs %q)", inputs[i], at,
					r.got[at:min(len(r.got), at+8)], r.want[at:min(len(r.want), at+8)],
					tok.Decode(r.got[at:min(len(r.got), at+8)]), tok.Decode(r.want[at:min(len(r.want), at+8)]))
				continue
			}
			known[name]++
		}
	}

	return known, sameText, sameIDs, failed
}

// llamacppRenderAll renders every case here and by the server.
func llamacppRenderAll(tok *Tokenizer, srv *llamaserver.Server, cases []llamacppCase) []llamacppRendered {
	renders := make([]llamacppRendered, len(cases))
	llamacppEach(len(cases), func(i int) {
		c := cases[i]
		r := &renders[i]
		var err error
		if r.want, err = tok.Render(c.request()); err != nil {
			r.err = fmt.Errorf("Render: %w", err)
			return
		}
		body := map[string]any{"messages": c.Messages, "add_generation_prompt": c.AddGenerationPrompt}
		if len(c.Tools) > 0 {
			body["tools"] = c.Tools
		}
		if len(c.Kwargs) > 0 {
			body["chat_template_kwargs"] = c.Kwargs
		}
		var out struct{ Prompt string }
		if err := srv.Call("/apply-template", body, &out); err != nil {
			r.err = err
			return
		}
		r.got = out.Prompt
	})
	return renders
}

// llamacppDivergences are the ways llama.cpp knowingly renders or
// tokenizes differently from Hugging Face, by name. Each is recognised by
// llamacppTemplateDivergence or llamacppTokenDivergence exactly: the
// difference must be wholly that one, or the case fails.
var llamacppDivergences = map[string]string{
	llamacppFloatArgs: "llama-server parses a tool call's arguments text into an object for a template " +
		"that can take one (its func_args_not_string workaround; Qwen3's prints `arguments | tojson` then), " +
		"and its Jinja engine's tojson writes a float with C++ ostream's default 6 significant digits " +
		"(-118.2437 becomes -118.244, 2.0 becomes 2), where transformers prints the text as given",
	llamacppNoNFC: "llama.cpp's BPE tokenizer applies no normalizer: Qwen's tokenizer.json composes text to NFC " +
		"before splitting, llama.cpp tokenizes the code points as they come (a decomposed é, Hangul jamo)",
}

const (
	llamacppFloatArgs = "tool-call arguments re-serialized with 6-digit floats"
	llamacppNoNFC     = "no NFC normalization"
)

// llamacppTemplateDivergence names the known divergence that explains
// llama.cpp rendering got where Render gives want, or "". The one known:
// the conversation's tool-call arguments, each written again as llama.cpp
// writes it (key order, spacing and strings as Python's json.dumps, floats
// as C++ ostream), render to got; written again with each number's own
// text, they render to want, so the numbers are all that differs.
func llamacppTemplateDivergence(tok *Tokenizer, c llamacppCase, want, got string) string {
	render := func(floats func(string) string) (string, bool) {
		msgs, ok := llamacppRewriteArguments(c.Messages, floats)
		if !ok {
			return "", false
		}
		r := c.request()
		r.Messages = msgs
		out, err := tok.Render(r)
		return out, err == nil
	}
	asGiven := func(num string) string { return num }
	if same, ok := render(asGiven); !ok || same != want {
		return ""
	}
	if ostream, ok := render(llamacppOstreamFloat); ok && ostream == got {
		return llamacppFloatArgs
	}
	return ""
}

// llamacppRewriteArguments rewrites each tool call's arguments text that
// holds a JSON object as llama.cpp's tojson writes it, numbers with a
// fraction or an exponent through floats; false when there is none to
// rewrite.
func llamacppRewriteArguments(messages []byte, floats func(string) string) ([]byte, bool) {
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(messages, &msgs) != nil {
		return nil, false
	}
	rewrote := false
	for _, m := range msgs {
		var calls []map[string]json.RawMessage
		if json.Unmarshal(m["tool_calls"], &calls) != nil || len(calls) == 0 {
			continue
		}
		for _, call := range calls {
			var fn map[string]json.RawMessage
			var args string
			if json.Unmarshal(call["function"], &fn) != nil || json.Unmarshal(fn["arguments"], &args) != nil {
				continue
			}
			var b strings.Builder
			dec := json.NewDecoder(strings.NewReader(args))
			dec.UseNumber()
			if first, err := dec.Token(); err != nil || first != json.Delim('{') || !llamacppWriteJSON(&b, dec, first, floats) {
				continue
			}
			if _, err := dec.Token(); err != io.EOF {
				continue // more after the object: llama.cpp keeps such a text as it is
			}
			fn["arguments"], _ = json.Marshal(b.String())
			call["function"], _ = json.Marshal(fn)
			rewrote = true
		}
		m["tool_calls"], _ = json.Marshal(calls)
	}
	if !rewrote {
		return nil, false
	}
	out, err := json.Marshal(msgs)
	return out, err == nil
}

// llamacppWriteJSON writes the value that starts with tok as llama.cpp's
// Jinja tojson does (common/jinja/value.cpp, value_to_json): ", " and ": "
// between items, keys in their order, strings escaping only the quote,
// the backslash and control characters, integers as given, floats through
// floats.
func llamacppWriteJSON(b *strings.Builder, dec *json.Decoder, tok json.Token, floats func(string) string) bool {
	switch v := tok.(type) {
	case json.Delim:
		closer, sep := json.Delim('}'), ""
		if v == '[' {
			closer = ']'
		}
		b.WriteString(v.String())
		for {
			next, err := dec.Token()
			if err != nil {
				return false
			}
			if next == closer {
				break
			}
			b.WriteString(sep)
			sep = ", "
			if v == '{' {
				key, _ := next.(string)
				llamacppWriteString(b, key)
				b.WriteString(": ")
				if next, err = dec.Token(); err != nil {
					return false
				}
			}
			if !llamacppWriteJSON(b, dec, next, floats) {
				return false
			}
		}
		b.WriteString(closer.String())
	case string:
		llamacppWriteString(b, v)
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			b.WriteString(floats(string(v)))
		} else {
			b.WriteString(string(v))
		}
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	default:
		return false
	}
	return true
}

func llamacppWriteString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// llamacppOstreamFloat is a JSON number as C++ `ostream << double` writes
// it by default: %g with 6 significant digits.
func llamacppOstreamFloat(num string) string {
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return num
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// llamacppTokenDivergence names the known divergence that explains
// llama.cpp tokenizing text as got where Encode gives want, or "". The one
// known: a text not in NFC, which llama.cpp tokenizes as it is; its NFC
// form, tokenized by llama.cpp (nfcIDs), must give Encode's ids.
func llamacppTokenDivergence(text string, want []int, nfcIDs func(string) ([]int, error)) string {
	if norm.NFC.IsNormalString(text) {
		return ""
	}
	if ids, err := nfcIDs(norm.NFC.String(text)); err == nil && slices.Equal(ids, want) {
		return llamacppNoNFC
	}
	return ""
}

// llamacppProbes are texts written here, beyond the datasets' (whose
// texts are all in NFC, with few CJK and emoji): scripts, emoji sequences,
// whitespace runs and line separators the pre-tokenizer's expression
// treats apart, and two texts not in NFC (a decomposed é, Hangul jamo),
// which show llamacppNoNFC.
var llamacppProbes = []string{
	"cafe\u0301 na\u0131ve",
	"\u1100\u1161\u11a8 \u1112\u1161\u11ab",
	"한국어 텍스트와 日本語のテキスト。中文：你好，世界！",
	"ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and ﬁ ligature, Ⅻ, 𝟙𝟚, ٣",
	"🦙🦙 😶\u200d🌫️ 👩\u200d👩\u200d👧 🇯🇵 \U0001FAE8 ✅",
	"क्षत्रिय ഴ്\u200d ไทย ກາວ ខ្មែរ",
	"a  \n\n  b\t\t\n   \n\t \t\t \t\n  c   ",
	"\r\n\r\n  x \u00a0\u00a0y\u2028z\u2029\u3000w\u205f",
	"I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
	"3 33 333 3333 33333 3.3 3..3 3...3 ------======= !!!!!!?????? ......",
	"<|im_start|>user\nhi<|im_end|><think>\n\n</think><tool_call>{}</tool_call><|fim_prefix|>",
}

// llamacppDiffAt is the first byte where a and b differ.
func llamacppDiffAt(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func llamacppAround(s string, at int) string {
	return s[max(0, at-60):min(len(s), at+60)]
}

// llamacppEach runs f(0..n-1) on a few goroutines: llama-server answers
// /apply-template and /tokenize on its HTTP threads, beside the slots.
func llamacppEach(n int, f func(i int)) {
	const workers = 4
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// llamacppCase is one conversation rendered on both sides.
type llamacppCase struct {
	ID                  string          `json:"id"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Kwargs              json.RawMessage `json:"-"` // chat_template_kwargs
}

func (c llamacppCase) request() Request {
	r := Request{Messages: c.Messages, AddGenerationPrompt: c.AddGenerationPrompt, Kwargs: c.Kwargs}
	if len(c.Tools) > 0 && string(c.Tools) != "null" {
		r.Tools = c.Tools
	}
	return r
}

// llamacppCases are the golden file's conversations (whole, and each
// assistant turn's prompt) and v1_sft_demo's, read from the dataset:
// each record whole, and its first user turn as a prompt.
func llamacppCases(t *testing.T) []llamacppCase {
	t.Helper()
	cases := testbin.Golden[llamacppCase](t, "qwen3")
	for i := range cases {
		if string(cases[i].Tools) == "null" {
			cases[i].Tools = nil
		}
	}

	// v1_sft_demo: OpenAI-style messages whose content is a list of
	// {"type": "text", "value": ...} parts.
	raw, err := os.ReadFile(testbin.RealData(t, "v1_sft_demo.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for n, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var rec struct {
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Value string `json:"value"`
				} `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("v1_sft_demo.jsonl line %d: %v", n+1, err)
		}
		type message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		var msgs []message
		for _, m := range rec.Messages {
			var text strings.Builder
			for _, p := range m.Content {
				text.WriteString(p.Value)
			}
			msgs = append(msgs, message{m.Role, text.String()})
		}
		whole, _ := json.Marshal(msgs)
		cases = append(cases, llamacppCase{ID: fmt.Sprintf("v1_sft_demo.jsonl#%d:whole", n), Messages: whole})
		if len(msgs) > 0 && msgs[0].Role == "user" {
			prompt, _ := json.Marshal(msgs[:1])
			cases = append(cases, llamacppCase{ID: fmt.Sprintf("v1_sft_demo.jsonl#%d:prompt1", n), Messages: prompt, AddGenerationPrompt: true})
		}
	}
	// Every tenth prompt again with thinking switched off, as a request's
	// chat_template_kwargs does it: Qwen3's template then opens the answer
	// with an empty <think></think>.
	for i, n := 0, len(cases); i < n; i++ {
		if c := cases[i]; c.AddGenerationPrompt && i%10 == 0 {
			c.ID += ":no-thinking"
			c.Kwargs = json.RawMessage(`{"enable_thinking": false}`)
			cases = append(cases, c)
		}
	}
	return cases
}

// llamacppTexts are the distinct plain texts of the cases: every message's
// content, every tool call's arguments, every tool list as the request
// gives it.
func llamacppTexts(cases []llamacppCase) []string {
	seen := map[string]bool{}
	var texts []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			texts = append(texts, s)
		}
	}
	for _, c := range cases {
		var msgs []struct {
			Content   any `json:"content"`
			ToolCalls []struct {
				Function struct {
					Arguments any `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		}
		if json.Unmarshal(c.Messages, &msgs) != nil {
			continue
		}
		for _, m := range msgs {
			if s, ok := m.Content.(string); ok {
				add(s)
			}
			for _, call := range m.ToolCalls {
				if s, ok := call.Function.Arguments.(string); ok {
					add(s)
				}
			}
		}
		if len(c.Tools) > 0 {
			add(string(c.Tools))
		}
	}
	return texts
}
