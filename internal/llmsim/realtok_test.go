package llmsim

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	modeltok "tokenmill/lib/tokenizer"
)

// modelFolder is a model's folder of ../shared/data/tokenizers and its
// tokenizer (skipped, saying why, where the folder is not there).
func modelFolder(t *testing.T, name string) (string, *modeltok.Tokenizer) {
	t.Helper()
	dir := testbin.Tokenizers(t, name)
	tok, err := loadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, tok
}

// wantPrompt is what the package renders and tokenizes for a chat
// request: Encode(Render(messages, tools, add_generation_prompt, kwargs)).
func wantPrompt(t *testing.T, tok *modeltok.Tokenizer, msgs, tools, kwargs string) (string, []int) {
	t.Helper()
	r := modeltok.Request{Messages: []byte(msgs), AddGenerationPrompt: true}
	if tools != "" {
		r.Tools = []byte(tools)
	}
	if kwargs != "" {
		r.Kwargs = []byte(kwargs)
	}
	text, err := tok.Render(r)
	if err != nil {
		t.Fatal(err)
	}
	return text, tok.Encode(text)
}

// idsAnswer is a chat answer with the ids a request asked for, in
// SGLang's places (each choice) or vLLM's (the prompt's at the top).
type idsAnswer struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		Message struct {
			Content          *string   `json:"content"`
			ReasoningContent *string   `json:"reasoning_content"`
			Reasoning        *string   `json:"reasoning"`
			ToolCalls        []callOut `json:"tool_calls"`
		} `json:"message"`
		FinishReason   string `json:"finish_reason"`
		PromptTokenIDs []int  `json:"prompt_token_ids"`
		TokenIDs       []int  `json:"token_ids"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func (a *idsAnswer) promptIDs() []int {
	if a.PromptTokenIDs != nil {
		return a.PromptTokenIDs
	}
	return a.Choices[0].PromptTokenIDs
}

func (a *idsAnswer) parts() (reasoning, content string) {
	m := a.Choices[0].Message
	for _, r := range []*string{m.ReasoningContent, m.Reasoning} {
		if r != nil {
			reasoning = *r
		}
	}
	if m.Content != nil {
		content = *m.Content
	}
	return reasoning, content
}

func chatWithIDs(t *testing.T, base, msgs, extra string) idsAnswer {
	t.Helper()
	s, b := postJSON(t, base+pathChat, `{"model":"`+DefaultModelName+`","messages":`+msgs+`,"return_token_ids":true`+extra+`}`)
	var a idsAnswer
	if err := json.Unmarshal(b, &a); s != 200 || err != nil || len(a.Choices) != 1 {
		t.Fatalf("chat: %d %v %s", s, err, b)
	}
	return a
}

const (
	skyMessages = `[{"role":"system","content":"Answer briefly."},{"role":"user","content":"Why is the sky blue? Grüße, 世界."}]`
	qwenEOS     = 151645
)

// With --tokenizer, the flavours that return ids return the model's: the
// prompt's are the package's rendering of the request, tokenized; the
// answer's decode to its reasoning and content with the model's thinking
// markup, or to its tool call in the template's markup, and end with the
// end-of-turn id when the answer ended on its own (counted in
// completion_tokens), not when max_tokens cut it.
func TestModelTokenizerChatIDs(t *testing.T) {
	dir, tok := modelFolder(t, "qwen3")
	for _, tc := range []struct {
		name          string
		tools, kwargs string
		maxTokens     int // 0: none
		toolCalls     bool
		finish        string
		promptEnds    string // what the rendered prompt ends with
		promptHas     string // what it holds
		thinks        bool   // the answer has reasoning
		emptyThink    bool   // the answer opens with an empty think block (thinking on, nothing to think)
	}{
		{name: "thinking", kwargs: `{"enable_thinking":true}`, finish: "stop", promptEnds: "<|im_start|>assistant\n", thinks: true},
		{name: "not thinking", kwargs: `{"enable_thinking":false}`, finish: "stop", promptEnds: "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{name: "cut by max_tokens", kwargs: `{"enable_thinking":true}`, maxTokens: 7, finish: "length", thinks: true},
		{name: "tools", tools: weatherTools, finish: "stop", thinks: true, promptHas: "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""},
		{name: "tool call", tools: weatherTools, toolCalls: true, finish: "tool_calls", emptyThink: true},
		{name: "tool call, not thinking", tools: weatherTools, kwargs: `{"enable_thinking":false}`, toolCalls: true, finish: "tool_calls", promptEnds: "<think>\n\n</think>\n\n"},
	} {
		for _, flavor := range []Flavor{FlavorSGLang, FlavorVLLM} {
			t.Run(tc.name+"/"+string(flavor), func(t *testing.T) {
				cfg := Config{Instant: true, Flavor: flavor, Tokenizer: dir, Reasoning: true}
				if tc.toolCalls {
					cfg.ToolCallRate = 1
				}
				base := startFleet(t, cfg, 1).URLs()[0]
				extra := ""
				if tc.tools != "" {
					extra += `,"tools":` + tc.tools
				}
				if tc.kwargs != "" {
					extra += `,"chat_template_kwargs":` + tc.kwargs
				}
				if tc.maxTokens > 0 {
					extra += `,"max_tokens":` + itoa(tc.maxTokens)
				}
				a := chatWithIDs(t, base, skyMessages, extra)
				rendered, want := wantPrompt(t, tok, skyMessages, tc.tools, tc.kwargs)
				if !slices.Equal(a.promptIDs(), want) || a.Usage.PromptTokens != len(want) {
					t.Errorf("prompt ids (%d, usage %d) are not the package's rendering (%d):\n got %v\nwant %v", len(a.promptIDs()), a.Usage.PromptTokens, len(want), a.promptIDs(), want)
				}
				if !strings.HasSuffix(rendered, tc.promptEnds) || !strings.Contains(rendered, tc.promptHas) {
					t.Errorf("rendered prompt %q: want it to end with %q and hold %q", rendered, tc.promptEnds, tc.promptHas)
				}
				c := a.Choices[0]
				ids := c.TokenIDs
				if c.FinishReason != tc.finish || a.Usage.CompletionTokens != len(ids) || len(ids) == 0 {
					t.Fatalf("finish %q, completion_tokens %d, %d ids; want finish %q and as many tokens as ids", c.FinishReason, a.Usage.CompletionTokens, len(ids), tc.finish)
				}
				ended := tc.finish != "length"
				if got := ids[len(ids)-1] == qwenEOS; got != ended {
					t.Errorf("answer ends with %d: want the end-of-turn %d %v", ids[len(ids)-1], qwenEOS, ended)
				}
				if tc.maxTokens > 0 && len(ids) != tc.maxTokens {
					t.Errorf("%d ids, max_tokens %d", len(ids), tc.maxTokens)
				}
				written := ids
				if ended {
					written = ids[:len(ids)-1]
				}
				text := writtenAs(t, &a, tc.thinks, ended)
				if tc.emptyThink {
					text = "<think>\n\n</think>\n\n" + text
				}
				if got := tok.Decode(written); got != text {
					t.Errorf("the answer's ids decode to\n%q\nthe answer says\n%q", got, text)
				}
			})
		}
	}
}

// writtenAs is the text a model writes for an answer as returned: its
// reasoning in Qwen3's markup before its content, or its tool calls.
func writtenAs(t *testing.T, a *idsAnswer, thinks, ended bool) string {
	t.Helper()
	if calls := a.Choices[0].Message.ToolCalls; len(calls) > 0 {
		var b strings.Builder
		for i, c := range calls {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString("<tool_call>\n{\"name\": \"" + c.Function.Name + "\", \"arguments\": " + c.Function.Arguments + "}\n</tool_call>")
		}
		return b.String()
	}
	reasoning, content := a.parts()
	switch {
	case !thinks:
		if reasoning != "" {
			t.Errorf("reasoning %q without thinking", reasoning)
		}
		return content
	case reasoning == "":
		t.Errorf("no reasoning while thinking")
	case !ended && content == "":
		return "<think>\n" + reasoning // cut while thinking
	}
	return "<think>\n" + reasoning + "\n</think>\n\n" + content
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A streamed answer shows what the whole one does, delta by delta, and
// counts the same tokens.
func TestModelTokenizerStream(t *testing.T) {
	dir, _ := modelFolder(t, "qwen3")
	// Decoded step by step, so that deltas end between any two ids.
	base := startFleet(t, Config{TimeScale: 1000, Flavor: FlavorVLLM, Tokenizer: dir, Reasoning: true}, 1).URLs()[0]
	const extra = `,"chat_template_kwargs":{"enable_thinking":true}`
	whole := chatWithIDs(t, base, skyMessages, extra)
	s, b := postJSON(t, base+pathChat, `{"model":"`+DefaultModelName+`","messages":`+skyMessages+extra+`,"stream":true,"stream_options":{"include_usage":true}}`)
	if s != 200 {
		t.Fatalf("stream: %d %s", s, b)
	}
	content, reasoning, usage := streamed(t, b)
	r, c := whole.parts()
	if reasoning != r || content != c || usage != whole.Usage.CompletionTokens {
		t.Errorf("streamed reasoning %q, content %q, %d tokens; whole %q, %q, %d", reasoning, content, usage, r, c, whole.Usage.CompletionTokens)
	}
}

// Every flavour charges a chat prompt the model's tokens, Ollama's (which
// returns no ids) too, and counts the answer's.
func TestModelTokenizerUsage(t *testing.T) {
	dir, tok := modelFolder(t, "qwen3")
	_, want := wantPrompt(t, tok, skyMessages, "", "")
	for _, flavor := range Flavors {
		base := startFleet(t, Config{Instant: true, Flavor: flavor, Tokenizer: dir}, 1).URLs()[0]
		s, b := postJSON(t, base+pathChat, `{"model":"`+DefaultModelName+`","messages":`+skyMessages+`,"max_tokens":9}`)
		var a idsAnswer
		if err := json.Unmarshal(b, &a); s != 200 || err != nil || a.Usage.PromptTokens != len(want) || a.Usage.CompletionTokens != 9 {
			t.Errorf("%s: %d %v usage %+v, want %d prompt tokens and 9 completion tokens", flavor, s, err, a.Usage, len(want))
		}
	}
}

// A streamed delta never ends inside a character: the text the first n
// ids show stops before a character they have not finished.
func TestModelAnswerWholeCharacters(t *testing.T) {
	_, tok := modelFolder(t, "qwen3")
	m := &modelTokenizer{tok: tok}
	text := "Grüße aus 東京 🙂, naïve café"
	ids := tok.Encode(text)
	a := &modelAnswer{text: text, ids: ids, offs: m.offsets(ids, len(text))}
	if a.offs[len(ids)] != len(text) {
		t.Fatalf("the ids decode to %d bytes of %d", a.offs[len(ids)], len(text))
	}
	split := false
	var shown strings.Builder
	for n, prev := 1, 0; n <= len(ids); n++ {
		k := a.cut(n)
		if k != a.offs[n] {
			split = true
		}
		if k < prev || !strings.HasPrefix(text, text[:k]) || !utf8.ValidString(text[prev:k]) {
			t.Fatalf("after %d ids: shown up to byte %d (before: %d) of %q", n, k, prev, text)
		}
		shown.WriteString(text[prev:k])
		prev = k
	}
	if shown.String() != text || !split {
		t.Errorf("shown %q (a character split by the ids: %v)", shown.String(), split)
	}
}

// The tokenize routes tokenize, and /apply-template renders, as the
// package does: vLLM's /tokenize a text with its special tokens and a
// conversation as a chat prompt, SGLang's /v1/tokenize a text, llama.cpp's
// /tokenize with or without the begin-of-text token and with its pieces;
// /detokenize gives the text back.
func TestModelTokenizerRoutes(t *testing.T) {
	qdir, qwen := modelFolder(t, "qwen3")
	ddir, deepseek := modelFolder(t, "deepseek_v3")
	const text = "Grüße, 世界! <|im_start|>user\nhi<|im_end|>"
	const msgs = `[{"role":"user","content":"Name a colour."}]`
	const kwargs = `{"enable_thinking":false}`
	rendered, chatIDs := wantPrompt(t, qwen, msgs, weatherTools, kwargs)
	for _, tc := range []struct {
		name   string
		flavor Flavor
		dir    string
		path   string
		body   string
		want   string // the answer's field holding the result
		ids    []int  // the ids wanted, or
		text   string // the text wanted
	}{
		{"vllm text", FlavorVLLM, qdir, pathTokenize, `{"prompt":` + quote(text) + `}`, "tokens", qwen.EncodeSpecial(text), ""},
		{"vllm text with BOS", FlavorVLLM, ddir, pathTokenize, `{"prompt":` + quote(text) + `}`, "tokens", deepseek.EncodeSpecial(text), ""},
		{"vllm text without special", FlavorVLLM, ddir, pathTokenize, `{"prompt":` + quote(text) + `,"add_special_tokens":false}`, "tokens", deepseek.Encode(text), ""},
		{"vllm messages", FlavorVLLM, qdir, pathTokenize, `{"messages":` + msgs + `,"tools":` + weatherTools + `,"chat_template_kwargs":` + kwargs + `}`, "tokens", chatIDs, ""},
		{"sglang text", FlavorSGLang, ddir, pathSGLTokenize, `{"prompt":` + quote(text) + `}`, "tokens", deepseek.EncodeSpecial(text), ""},
		{"llamacpp apply-template", FlavorLlamaCpp, qdir, pathApplyTemplate, `{"messages":` + msgs + `,"tools":` + weatherTools + `,"chat_template_kwargs":` + kwargs + `}`, "prompt", nil, rendered},
		{"llamacpp tokenize", FlavorLlamaCpp, qdir, pathTokenize, `{"content":` + quote(rendered) + `}`, "tokens", chatIDs, ""},
		{"llamacpp tokenize add_special", FlavorLlamaCpp, ddir, pathTokenize, `{"content":` + quote(text) + `,"add_special":true}`, "tokens", deepseek.EncodeSpecial(text), ""},
		{"llamacpp tokenize no add_special", FlavorLlamaCpp, ddir, pathTokenize, `{"content":` + quote(text) + `}`, "tokens", deepseek.Encode(text), ""},
		{"llamacpp tokenize parse_special false", FlavorLlamaCpp, qdir, pathTokenize, `{"content":` + quote(rendered) + `,"parse_special":false}`, "tokens", qwen.EncodePlain(rendered), ""},
		{"vllm detokenize", FlavorVLLM, qdir, pathDetokenize, `{"tokens":` + idsJSON(chatIDs) + `}`, "prompt", nil, rendered},
		{"llamacpp detokenize", FlavorLlamaCpp, ddir, pathDetokenize, `{"tokens":` + idsJSON(deepseek.EncodeSpecial(text)) + `}`, "content", nil, deepseek.Decode(deepseek.EncodeSpecial(text))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := startFleet(t, Config{Instant: true, Flavor: tc.flavor, Tokenizer: tc.dir}, 1).URLs()[0]
			s, b := postJSON(t, base+tc.path, tc.body)
			var got map[string]json.RawMessage
			if err := json.Unmarshal(b, &got); s != 200 || err != nil {
				t.Fatalf("%d %v %s", s, err, b)
			}
			if tc.ids != nil {
				var ids []int
				if err := json.Unmarshal(got[tc.want], &ids); err != nil || !slices.Equal(ids, tc.ids) {
					t.Errorf("%s %v\nwant %v", tc.want, ids, tc.ids)
				}
				return
			}
			var s2 string
			if err := json.Unmarshal(got[tc.want], &s2); err != nil || s2 != tc.text {
				t.Errorf("%s %q\nwant %q", tc.want, s2, tc.text)
			}
		})
	}

	// with_pieces: each id with the bytes it stands for.
	base := startFleet(t, Config{Instant: true, Flavor: FlavorLlamaCpp, Tokenizer: qdir}, 1).URLs()[0]
	_, b := postJSON(t, base+pathTokenize, `{"content":`+quote(text)+`,"with_pieces":true}`)
	var pieces struct {
		Tokens []struct {
			ID    int             `json:"id"`
			Piece json.RawMessage `json:"piece"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal(b, &pieces); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	var ids []int
	var joined []byte
	for _, p := range pieces.Tokens {
		ids = append(ids, p.ID)
		var s string
		var raw []byte
		if json.Unmarshal(p.Piece, &s) == nil {
			joined = append(joined, s...)
		} else if json.Unmarshal(p.Piece, &raw) == nil {
			joined = append(joined, raw...)
		}
	}
	if !slices.Equal(ids, qwen.Encode(text)) || string(joined) != text {
		t.Errorf("with_pieces: ids %v, pieces %q; want %v, %q", ids, joined, qwen.Encode(text), text)
	}
}

func idsJSON(ids []int) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// llama.cpp's chat answer has no ids: its client renders the prompt with
// /apply-template and tokenizes it with /tokenize, and /completion with
// return_tokens gives the answer's ids. The model answers a prompt
// rendered with thinking on as it answers a chat: with its think block,
// empty when it has nothing to think; with thinking off the prompt holds
// the empty block, and the answer does not.
func TestModelTokenizerLlamaCpp(t *testing.T) {
	dir, tok := modelFolder(t, "qwen3")
	base := startFleet(t, Config{Instant: true, Flavor: FlavorLlamaCpp, Tokenizer: dir}, 1).URLs()[0]
	for _, tc := range []struct {
		name, kwargs string
		opens        string // what the answer opens with
	}{
		{"thinking on", "", "<think>\n\n</think>\n\n"},
		{"thinking off", `{"enable_thinking":false}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rendered, want := wantPrompt(t, tok, skyMessages, "", tc.kwargs)
			body := `{"messages":` + skyMessages
			if tc.kwargs != "" {
				body += `,"chat_template_kwargs":` + tc.kwargs
			}
			var tpl struct{ Prompt string }
			if s, b := postJSON(t, base+pathApplyTemplate, body+"}"); s != 200 || json.Unmarshal(b, &tpl) != nil || tpl.Prompt != rendered {
				t.Fatalf("/apply-template: %d %s", s, b)
			}
			var toks struct{ Tokens []int }
			if s, b := postJSON(t, base+pathTokenize, `{"content":`+quote(rendered)+`}`); s != 200 || json.Unmarshal(b, &toks) != nil || !slices.Equal(toks.Tokens, want) {
				t.Fatalf("/tokenize: %d %s\nwant %v", s, b, want)
			}
			var a struct {
				Content         string `json:"content"`
				Tokens          []int  `json:"tokens"`
				TokensPredicted int    `json:"tokens_predicted"`
				TokensEvaluated int    `json:"tokens_evaluated"`
				StopType        string `json:"stop_type"`
			}
			s, b := postJSON(t, base+pathLlamaComplete, `{"prompt":`+quote(rendered)+`,"return_tokens":true}`)
			if s != 200 || json.Unmarshal(b, &a) != nil {
				t.Fatalf("/completion: %d %s", s, b)
			}
			n := len(a.Tokens)
			if a.StopType != "eos" || n == 0 || a.Tokens[n-1] != qwenEOS || a.TokensPredicted != n || a.TokensEvaluated != len(want) ||
				tok.Decode(a.Tokens[:n-1]) != a.Content {
				t.Errorf("/completion: stop %s, %d tokens (predicted %d, last %v), evaluated %d of %d; content %q, decoded %q",
					a.StopType, n, a.TokensPredicted, a.Tokens[max(n-1, 0):], a.TokensEvaluated, len(want), a.Content, tok.Decode(a.Tokens[:max(n-1, 0)]))
			}
			if rest, ok := strings.CutPrefix(a.Content, tc.opens); !ok || strings.Contains(rest, "<think>") {
				t.Errorf("/completion's answer %q...: want it to open with %q and no other think block", a.Content[:min(len(a.Content), 60)], tc.opens)
			}
		})
	}
}

// A template that raises is a 400 in the flavour's dialect, with the
// template's message, wherever it renders: a chat request, vLLM's
// /tokenize, llama.cpp's /apply-template.
func TestModelTokenizerTemplateError(t *testing.T) {
	dir, _ := modelFolder(t, "qwen3")
	const msg = "Conversation roles must alternate user/assistant/user/assistant/..."
	folder := modelFolderWith(t, dir, `{%- if messages[0].role == 'assistant' %}{{ raise_exception('`+msg+`') }}{%- endif %}`+
		`{%- for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor %}`+
		`{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}`)
	const msgs = `[{"role":"assistant","content":"Hello."},{"role":"user","content":"Hi."}]`
	for _, tc := range []struct {
		flavor     Flavor
		path, body string
		shape      string // where the flavour puts the message
	}{
		{FlavorSGLang, pathChat, `{"messages":` + msgs + `}`, `{"object":"error","message":"` + msg + `","type":"BadRequestError"`},
		{FlavorVLLM, pathChat, `{"model":"` + DefaultModelName + `","messages":` + msgs + `}`, `{"error":{"message":"` + msg + `","type":"BadRequestError"`},
		{FlavorVLLM, pathTokenize, `{"messages":` + msgs + `}`, `{"error":{"message":"` + msg + `"`},
		{FlavorLlamaCpp, pathChat, `{"messages":` + msgs + `}`, `{"error":{"code":400,"message":"` + msg + `","type":"invalid_request_error"`},
		{FlavorLlamaCpp, pathApplyTemplate, `{"messages":` + msgs + `}`, `{"error":{"code":400,"message":"` + msg + `"`},
		{FlavorOpenAI, pathChat, `{"model":"` + DefaultModelName + `","messages":` + msgs + `}`, `{"error":{"message":"` + msg + `","type":"invalid_request_error"`},
	} {
		base := startFleet(t, Config{Instant: true, Flavor: tc.flavor, Tokenizer: folder}, 1).URLs()[0]
		if s, b := postJSON(t, base+tc.path, tc.body); s != 400 || !strings.HasPrefix(string(b), tc.shape) {
			t.Errorf("%s %s: %d %s\nwant 400 %s...", tc.flavor, tc.path, s, b, tc.shape)
		}
	}
}

// modelFolderWith is a model folder of dir's tokenizer with another chat
// template (its chat_template.jinja, which takes precedence), its files
// linked, not copied.
func modelFolderWith(t *testing.T, dir, template string) string {
	t.Helper()
	tmp := linkedModelFolder(t, dir)
	if err := os.WriteFile(filepath.Join(tmp, "chat_template.jinja"), []byte(template), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// linkedModelFolder is a new folder holding links to dir's tokenizer.json
// and tokenizer_config.json, for a test to add files of its own to.
func linkedModelFolder(t *testing.T, dir string) string {
	t.Helper()
	tmp := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		abs, err := filepath.Abs(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(tmp, f)); err != nil {
			t.Skipf("no symlinks here: %v", err)
		}
	}
	return tmp
}

// --template-drift renders every conversation without a system turn with
// one in front (the prompt's ids are the system turn's, then the undrifted
// prompt's), and the template reported is the drifted one.
func TestTemplateDrift(t *testing.T) {
	dir, tok := modelFolder(t, "qwen3")
	const msgs = `[{"role":"user","content":"Hello there."}]`
	_, plain := wantPrompt(t, tok, msgs, "", "")
	system := tok.Encode("<|im_start|>system\n" + driftSystemPrompt + "<|im_end|>\n")
	drifted := startFleet(t, Config{Instant: true, Flavor: FlavorVLLM, Tokenizer: dir, TemplateDrift: true}, 1).URLs()[0]
	a := chatWithIDs(t, drifted, msgs, `,"max_tokens":1`)
	if got := a.promptIDs(); !slices.Equal(got, append(slices.Clone(system), plain...)) {
		t.Errorf("drifted prompt %v\nwant the system turn %v then %v", got, system, plain)
	}
	// A conversation with a system turn renders as before.
	_, own := wantPrompt(t, tok, skyMessages, "", "")
	if a := chatWithIDs(t, drifted, skyMessages, `,"max_tokens":1`); !slices.Equal(a.promptIDs(), own) {
		t.Errorf("a conversation with its system turn drifted: %v\nwant %v", a.promptIDs(), own)
	}

	want := driftPrefix + tok.TemplateSource()
	for _, tc := range []struct {
		flavor Flavor
		path   string
	}{{FlavorLlamaCpp, pathLlamaProps}, {FlavorSGLang, pathServerInfo}} {
		base := startFleet(t, Config{Instant: true, Flavor: tc.flavor, Tokenizer: dir, TemplateDrift: true}, 1).URLs()[0]
		_, body := getBody(t, base+tc.path)
		var info struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal([]byte(body), &info); err != nil || info.ChatTemplate != want ||
			modeltok.TemplateHashOf(info.ChatTemplate) == tok.TemplateHash() {
			t.Errorf("%s %s: chat_template %.200q, want the drifted template", tc.flavor, tc.path, info.ChatTemplate)
		}
		base = startFleet(t, Config{Instant: true, Flavor: tc.flavor, Tokenizer: dir}, 1).URLs()[0]
		_, body = getBody(t, base+tc.path)
		if err := json.Unmarshal([]byte(body), &info); err != nil || modeltok.TemplateHashOf(info.ChatTemplate) != tok.TemplateHash() {
			t.Errorf("%s %s without drift: chat_template %.200q, want the model's", tc.flavor, tc.path, info.ChatTemplate)
		}
	}
}

// The drift llmsim renders is what the template engine renders with the
// drifted template's text: a folder whose chat_template.jinja is the
// drifted text renders every conversation as the drifted endpoint does.
func TestTemplateDriftIsTheTemplate(t *testing.T) {
	dir, _ := modelFolder(t, "qwen3")
	m, err := newModelTokenizer(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := modeltok.Load(modelFolderWith(t, dir, m.source))
	if err != nil {
		t.Fatalf("the engine does not take the drifted template: %v", err)
	}
	for _, c := range []struct{ msgs, tools, kwargs string }{
		{msgs: `[{"role":"user","content":"Hi"}]`},
		{msgs: skyMessages},
		{msgs: `[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!","reasoning_content":"greet"},{"role":"user","content":"Bye"}]`},
		{msgs: `[{"role":"user","content":"Weather?"}]`, tools: weatherTools},
		{msgs: `[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]`, tools: weatherTools},
		{msgs: `[{"role":"user","content":"Hi"}]`, kwargs: `{"enable_thinking":false}`},
		{msgs: `[]`},
	} {
		var wire []wireMessage
		if err := json.Unmarshal([]byte(c.msgs), &wire); err != nil {
			t.Fatal(err)
		}
		p, err := conversationPrompt(wire, json.RawMessage(c.tools), json.RawMessage(c.kwargs))
		if err != nil {
			t.Fatal(err)
		}
		ours, err := m.render(&p, true)
		if err != nil {
			t.Fatalf("%s: %v", c.msgs, err)
		}
		// The engine gets the conversation as llmsim hands it over, undrifted.
		r := modeltok.Request{Messages: (&modelTokenizer{tok: m.tok}).appendMessages(nil, &p), AddGenerationPrompt: true}
		if c.tools != "" {
			r.Tools = []byte(c.tools)
		}
		if c.kwargs != "" {
			r.Kwargs = []byte(c.kwargs)
		}
		theirs, err := engine.Render(r)
		if err != nil || theirs != ours {
			t.Errorf("%s: the drifted template renders (%v)\n%q\nllmsim renders\n%q", c.msgs, err, theirs, ours)
		}
	}
}

// DeepSeek-V3's folder works as Qwen3's: its template writes its own
// begin-of-text token, its answers end with its end-of-sentence token, and
// its tool calls are written in its own markup.
func TestModelTokenizerDeepSeek(t *testing.T) {
	dir, tok := modelFolder(t, "deepseek_v3")
	eos := tok.EndOfTurn[0]
	for _, calls := range []bool{false, true} {
		cfg := Config{Instant: true, Flavor: FlavorVLLM, Tokenizer: dir}
		extra := ""
		if calls {
			cfg.ToolCallRate, extra = 1, `,"tools":`+weatherTools
		}
		base := startFleet(t, cfg, 1).URLs()[0]
		a := chatWithIDs(t, base, skyMessages, extra)
		tools := ""
		if calls {
			tools = weatherTools
		}
		_, want := wantPrompt(t, tok, skyMessages, tools, "")
		ids := a.Choices[0].TokenIDs
		if !slices.Equal(a.promptIDs(), want) || want[0] != tok.BOSID {
			t.Errorf("calls %v: prompt ids %v\nwant %v (starting with the begin-of-text %d)", calls, a.promptIDs(), want, tok.BOSID)
		}
		if len(ids) == 0 || ids[len(ids)-1] != eos || a.Usage.CompletionTokens != len(ids) {
			t.Fatalf("calls %v: answer ids %v (completion_tokens %d), want them to end with %d", calls, ids, a.Usage.CompletionTokens, eos)
		}
		text := tok.Decode(ids[:len(ids)-1])
		if _, content := a.parts(); !calls && text != content {
			t.Errorf("answer ids decode to %q, content %q", text, content)
		}
		if calls {
			c := a.Choices[0].Message.ToolCalls
			if a.Choices[0].FinishReason != "tool_calls" || len(c) == 0 ||
				!strings.HasPrefix(text, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"+c[0].Function.Name+"\n```json\n"+c[0].Function.Arguments+"\n```<｜tool▁call▁end｜>") {
				t.Errorf("tool call %+v written as %q", c, text)
			}
		}
	}
}

// --tokenizer with a folder that does not load, or beside --chat-template,
// and --template-drift without it, are usage errors saying why.
func TestTokenizerFlagsRefused(t *testing.T) {
	dir, _ := modelFolder(t, "qwen3")
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--tokenizer", empty}, "tokenizer.json"},
		{[]string{"--tokenizer", dir, "--chat-template", "qwen3"}, "--chat-template"},
		{[]string{"--template-drift"}, "--tokenizer"},
	} {
		var stderr strings.Builder
		env := &cli.Env{Name: "llmsim", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
		code := cli.Run(context.Background(), env, Description, &Command{}, append([]string{"--listen", "127.0.0.1:0"}, tc.args...))
		if code != cli.ExitUsage || !strings.Contains(stderr.String(), tc.says) {
			t.Errorf("%v: exit %d, want %d saying %q; stderr:\n%s", tc.args, code, cli.ExitUsage, tc.says, stderr.String())
		}
	}
	if _, err := Start(context.Background(), Config{Tokenizer: dir, ChatTemplate: "qwen3"}, 1); err == nil {
		t.Errorf("Start took Tokenizer and ChatTemplate together")
	}
}

// llmsim samples as a server does when a request sends no temperature:
// with --temperature, else the model folder's generation_config.json
// temperature, else DefaultTemperature; --temperature 0 is greedy.
func TestTemperatureDefault(t *testing.T) {
	qwen, _ := modelFolder(t, "qwen3")
	withGen := linkedModelFolder(t, qwen)
	if err := os.WriteFile(filepath.Join(withGen, "generation_config.json"), []byte(`{"eos_token_id":[151645,151643],"temperature":0.7,"top_p":0.8}`), 0o644); err != nil {
		t.Fatal(err)
	}
	given := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		c    Command
		want float64
	}{
		{"nothing said", Command{}, DefaultTemperature},
		{"greedy", Command{Temperature: given(0)}, 0},
		{"a folder without generation_config.json", Command{Tokenizer: qwen}, DefaultTemperature},
		{"the folder's", Command{Tokenizer: withGen}, 0.7},
		{"the flag over the folder's", Command{Tokenizer: withGen, Temperature: given(1.2)}, 1.2},
	} {
		if got := tc.c.temperature(); got != tc.want {
			t.Errorf("%s: temperature %g, want %g", tc.name, got, tc.want)
		}
	}
}
