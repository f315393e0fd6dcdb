package llmsim

import (
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
)

// llamaChatBody is a chat request as a client sends it to llama.cpp: the
// messages, tools and chat_template_kwargs that render, and settings that
// do not.
const llamaChatBody = `{"model":"m","messages":` + skyMessages + `,"tools":` + weatherTools +
	`,"chat_template_kwargs":{"enable_thinking":false},"max_tokens":1,"temperature":0.5,"seed":3,"stream":false}`

// llamaRoutes asks the flavour's routes about one chat request: the text
// /apply-template renders of the request's own body, the ids /tokenize
// gives it with and without add_special, the prompt_tokens the chat route
// charges the same request, and the tokens /completion evaluates when
// sent the ids.
type llamaRoutes struct {
	rendered        string
	ids, plain      []int
	charged, evaled int
}

func askLlama(t *testing.T, base, body string) llamaRoutes {
	t.Helper()
	var r llamaRoutes
	var tpl struct {
		Prompt *string `json:"prompt"`
	}
	if s, b := postJSON(t, base+pathApplyTemplate, body); s != 200 || json.Unmarshal(b, &tpl) != nil || tpl.Prompt == nil {
		t.Fatalf("/apply-template: %d %s", s, b)
	}
	r.rendered = *tpl.Prompt
	for _, c := range []struct {
		special bool
		ids     *[]int
	}{{true, &r.ids}, {false, &r.plain}} {
		var toks struct{ Tokens []int }
		req := `{"content":` + quote(r.rendered) + `,"add_special":` + map[bool]string{true: "true", false: "false"}[c.special] + `}`
		if s, b := postJSON(t, base+pathTokenize, req); s != 200 || json.Unmarshal(b, &toks) != nil {
			t.Fatalf("/tokenize: %d %s", s, b)
		}
		*c.ids = toks.Tokens
	}
	var chat struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if s, b := postJSON(t, base+pathChat, body); s != 200 || json.Unmarshal(b, &chat) != nil {
		t.Fatalf("chat: %d %s", s, b)
	}
	r.charged = chat.Usage.PromptTokens
	var cmpl struct {
		TokensEvaluated int `json:"tokens_evaluated"`
	}
	if s, b := postJSON(t, base+pathLlamaComplete, `{"prompt":`+idsJSON(r.ids)+`,"n_predict":1,"return_tokens":true}`); s != 200 || json.Unmarshal(b, &cmpl) != nil {
		t.Fatalf("/completion: %d %s", s, b)
	}
	r.evaled = cmpl.TokensEvaluated
	return r
}

// As llama-server does: /apply-template reads a whole chat request, so
// what renders (tools, chat_template_kwargs) renders as in the chat
// route, and /tokenize of its text with add_special gives the ids the
// chat route charges (the begin-of-text token the vocabulary adds among
// them, never in the text), which /completion runs as sent. Without
// add_special a vocabulary with that token counts one short. A template
// that renders no tools leaves them out of both.
func TestLlamaCppRendersAsTheChatRoute(t *testing.T) {
	qdir, qwen := modelFolder(t, "qwen3")
	ddir, deepseek := modelFolder(t, "deepseek_v3")
	dsBOS := string(deepseek.DecodeBytes([]int{deepseek.BOSID}))
	for _, tc := range []struct {
		name  string
		cfg   Config
		bos   int    // the begin-of-text id the chat route adds, -1 none
		has   string // what the text must hold ("" nothing)
		lacks string // what it must not
	}{
		{"llmsim's own", Config{}, -1, "<|im_start|>user\nWhy is the sky blue?", ""},
		{"llmsim's own with a begin-of-text token", Config{LlamaBOS: true}, idBOS, "", "<s>"},
		{"qwen3, kwargs and tools", Config{Tokenizer: qdir}, -1, "<think>\n\n</think>\n\n", ""},
		{"qwen3's tools", Config{Tokenizer: qdir}, -1, "get_weather", ""},
		{"qwen3, a template without tools", Config{Tokenizer: qdir, LlamaNoTools: true}, -1, "<think>\n\n</think>\n\n", "get_weather"},
		{"deepseek, whose template prints its begin-of-text token", Config{Tokenizer: ddir}, deepseek.BOSID, "", dsBOS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Instant, tc.cfg.Flavor = true, FlavorLlamaCpp
			base := startFleet(t, tc.cfg, 1).URLs()[0]
			r := askLlama(t, base, llamaChatBody)
			if r.charged != len(r.ids) || r.evaled != len(r.ids) {
				t.Errorf("chat charged %d, /tokenize with add_special gave %d ids, /completion evaluated %d", r.charged, len(r.ids), r.evaled)
			}
			if tc.has != "" && !strings.Contains(r.rendered, tc.has) || tc.lacks != "" && strings.Contains(r.rendered, tc.lacks) {
				t.Errorf("rendered %q: want %q in it, %q not", r.rendered, tc.has, tc.lacks)
			}
			switch {
			case tc.bos < 0 && !slices.Equal(r.ids, r.plain):
				t.Errorf("no begin-of-text token, yet add_special gave %v, without %v", r.ids, r.plain)
			case tc.bos >= 0 && (r.ids[0] != tc.bos || !slices.Equal(r.ids[1:], r.plain)):
				t.Errorf("add_special gave %v, without %v: want %d before the same ids", r.ids[:min(3, len(r.ids))], r.plain[:min(3, len(r.plain))], tc.bos)
			}
		})
	}
	// The kwargs reach the rendering: without them, Qwen3 thinks.
	base := startFleet(t, Config{Instant: true, Flavor: FlavorLlamaCpp, Tokenizer: qdir}, 1).URLs()[0]
	with, _ := wantPrompt(t, qwen, skyMessages, weatherTools, `{"enable_thinking":false}`)
	without, _ := wantPrompt(t, qwen, skyMessages, weatherTools, "")
	if r := askLlama(t, base, llamaChatBody); r.rendered != with || with == without {
		t.Errorf("rendered %q\nwant %q (not %q)", r.rendered, with, without)
	}
}

// A text prompt is run with the begin-of-text token where the vocabulary
// has one, on the completion routes as in /tokenize with add_special;
// token ids are run as sent.
func TestLlamaCppBOSOnTexts(t *testing.T) {
	const text = "Once upon a time, in a land of many tokens,"
	for _, bos := range []bool{false, true} {
		base := startFleet(t, Config{Instant: true, Flavor: FlavorLlamaCpp, LlamaBOS: bos}, 1).URLs()[0]
		want := TextTokens(text)
		if bos {
			want++
		}
		var toks struct{ Tokens []int }
		if s, b := postJSON(t, base+pathTokenize, `{"content":`+quote(text)+`,"add_special":true}`); s != 200 || json.Unmarshal(b, &toks) != nil || len(toks.Tokens) != want {
			t.Errorf("bos %v: /tokenize: %d %s, want %d ids", bos, s, b, want)
		}
		var cmpl struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if s, b := postJSON(t, base+pathCompletions, `{"prompt":`+quote(text)+`,"max_tokens":1}`); s != 200 || json.Unmarshal(b, &cmpl) != nil || cmpl.Usage.PromptTokens != want {
			t.Errorf("bos %v: /v1/completions: %d %s, want %d prompt tokens", bos, s, b, want)
		}
		var native struct {
			TokensEvaluated int `json:"tokens_evaluated"`
		}
		if s, b := postJSON(t, base+pathLlamaComplete, `{"prompt":[5,6,7],"n_predict":1}`); s != 200 || json.Unmarshal(b, &native) != nil || native.TokensEvaluated != 3 {
			t.Errorf("bos %v: /completion of 3 ids: %d %s", bos, s, b)
		}
	}
}

// /props says what the template supports (chat_template_caps): tools
// where it renders a tool it is given. A chat request with tools that a
// template renders none of is answered 200 as if it had none: the tools
// left out of the prompt, and never called.
func TestLlamaCppToolCaps(t *testing.T) {
	qdir, _ := modelFolder(t, "qwen3")
	ddir, _ := modelFolder(t, "deepseek_v3")
	for _, tc := range []struct {
		name  string
		cfg   Config
		tools bool
	}{
		{"llmsim's own", Config{}, true},
		{"llmsim's own, no tools", Config{LlamaNoTools: true}, false},
		{"qwen3", Config{Tokenizer: qdir}, true},
		{"qwen3, no tools", Config{Tokenizer: qdir, LlamaNoTools: true}, false},
		{"deepseek, whose template renders none", Config{Tokenizer: ddir}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Instant, tc.cfg.Flavor, tc.cfg.ToolCallRate = true, FlavorLlamaCpp, 1
			base := startFleet(t, tc.cfg, 1).URLs()[0]
			s, b := getBody(t, base+pathLlamaProps)
			var props struct {
				Caps map[string]bool `json:"chat_template_caps"`
			}
			if err := json.Unmarshal([]byte(b), &props); s != 200 || err != nil {
				t.Fatalf("/props: %d %v %s", s, err, b)
			}
			if got, ok := props.Caps["supports_tools"]; !ok || got != tc.tools {
				t.Errorf("chat_template_caps %v, want supports_tools %v", props.Caps, tc.tools)
			}
			plain := chatWithIDs(t, base, skyMessages, `,"max_tokens":64`)
			offered := chatWithIDs(t, base, skyMessages, `,"max_tokens":64,"tools":`+weatherTools)
			called := len(offered.Choices[0].Message.ToolCalls) > 0
			if called != tc.tools || !tc.tools && offered.Usage.PromptTokens != plain.Usage.PromptTokens {
				t.Errorf("tools offered: called %v, prompt %d tokens (%d without them); want called %v, the tools in the prompt %v",
					called, offered.Usage.PromptTokens, plain.Usage.PromptTokens, tc.tools, tc.tools)
			}
		})
	}
}
