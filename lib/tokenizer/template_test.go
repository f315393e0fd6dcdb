package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// goldenCase is one reference rendering of ../shared/data/tokenizers/golden.
type goldenCase struct {
	ID                  string          `json:"id"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	EnableThinking      *bool           `json:"enable_thinking"`
	Rendered            string          `json:"rendered"`
	IDs                 []int           `json:"ids"`
}

func (c goldenCase) request() Request {
	r := Request{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.AddGenerationPrompt}
	if c.EnableThinking != nil {
		r.Kwargs, _ = json.Marshal(map[string]bool{"enable_thinking": *c.EnableThinking})
	}
	return r
}

// goldenCases reads a model's reference cases, skipping where they are
// not beside the repository.
func goldenCases(t testing.TB, model string) []goldenCase {
	t.Helper()
	return testbin.Golden[goldenCase](t, model)
}

// testTemplate loads only a folder's chat template, so that rendering is
// tested apart from tokenizing.
func testTemplate(t testing.TB, dir string) *template {
	t.Helper()
	cfg, err := readConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := loadTemplate(dir, cfg, cfg.BOSToken.Content, cfg.EOSToken.Content)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestTemplateGolden renders every reference case of both real templates
// and wants each exactly.
func TestTemplateGolden(t *testing.T) {
	for _, model := range []string{"qwen3", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			tmpl := testTemplate(t, testbin.Tokenizers(t, model))
			cases := goldenCases(t, model)
			bad := 0
			for _, c := range cases {
				got, err := tmpl.render(c.request())
				if err == nil && got == c.Rendered {
					continue
				}
				if bad++; bad <= 3 {
					at := firstByteDiff(got, c.Rendered)
					t.Errorf("%s: err %v; differs at byte %d: got %q, want %q", c.ID, err, at, around(got, at), around(c.Rendered, at))
				}
			}
			if bad > 0 || len(cases) != 4835 {
				t.Fatalf("%d of %d cases rendered differently (want 4835 cases, all equal)", bad, len(cases))
			}
		})
	}
}

func firstByteDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func around(s string, at int) string {
	return s[max(0, at-40):min(len(s), at+40)]
}

// writeFolder writes a model folder of the given files for a test.
func writeFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func configWith(t *testing.T, template any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"bos_token": "<s>", "eos_token": map[string]any{"content": "</s>"}, "chat_template": template})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTemplateRender(t *testing.T) {
	const loop = `{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}`
	user := []byte(`[{"role":"user","content":"hi"}]`)
	for _, tc := range []struct {
		name     string
		files    map[string]string
		req      Request
		want     string
		loadErr  string
		raiseErr string
	}{
		{name: "config text", files: map[string]string{fileTokenizerConfig: configWith(t, loop)},
			req: Request{Messages: user, AddGenerationPrompt: true}, want: "<s>[user]hi[assistant]"},
		{name: "chat_template.jinja wins", files: map[string]string{fileTokenizerConfig: configWith(t, loop), fileChatTemplate: "J{{ messages|length }}{{ eos_token }}"},
			req: Request{Messages: user}, want: "J1</s>"},
		{name: "named templates, default", files: map[string]string{fileTokenizerConfig: configWith(t, []map[string]string{{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T{{ tools|length }}"}})},
			req: Request{Messages: user}, want: "D"},
		{name: "named templates, tool_use for tools", files: map[string]string{fileTokenizerConfig: configWith(t, []map[string]string{{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T{{ tools|length }}"}})},
			req: Request{Messages: user, Tools: []byte(`[{"type":"function","function":{"name":"f"}}]`)}, want: "T1"},
		{name: "kwargs", files: map[string]string{fileChatTemplate: `{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on{% endif %}{{ reasoning_effort|default('none') }}`},
			req: Request{Messages: user, Kwargs: []byte(`{"enable_thinking":false,"reasoning_effort":"high"}`)}, want: "offhigh"},
		{name: "tojson keeps key order and Python's spacing", files: map[string]string{fileChatTemplate: `{{ tools[0]|tojson }}`},
			req: Request{Messages: user, Tools: []byte(`[{"z":1,"a":[true,null,1.5,"é\"x"],"m":{}}]`)}, want: `{"z": 1, "a": [true, null, 1.5, "é\"x"], "m": {}}`},
		{name: "content as parts", files: map[string]string{fileChatTemplate: `{% for p in messages[0].content %}{{ p.text }}{% endfor %}`},
			req: Request{Messages: []byte(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`)}, want: "ab"},
		{name: "raise_exception fails the record", files: map[string]string{fileChatTemplate: `{% if messages[0].role != 'system' %}{{ raise_exception('the first message must be the system prompt') }}{% endif %}ok`},
			req: Request{Messages: user}, raiseErr: "the first message must be the system prompt"},
		{name: "an unknown filter is refused at load", files: map[string]string{fileChatTemplate: `{{ messages|length }}{% if x %}{{ x|wordwrap(3) }}{% endif %}`},
			loadErr: `filter "wordwrap"`},
		{name: "an unknown test is refused at load", files: map[string]string{fileChatTemplate: `{% if x is divisibleby(3) %}{% endif %}{{ messages|length }}`},
			loadErr: `test "divisibleby"`},
		{name: "an unknown method is refused at load", files: map[string]string{fileChatTemplate: `{{ messages[0].content.zfill(3) }}`},
			loadErr: `method "zfill"`},
		{name: "a literal that looks like a filter is not one", files: map[string]string{fileChatTemplate: `{{ '| wordwrap' }}{{ "x is divisibleby" }}`},
			req: Request{Messages: user}, want: "| wordwrapx is divisibleby"},
		{name: "syntax error", files: map[string]string{fileChatTemplate: `{% for m in messages %}`}, loadErr: "does not compile"},
		{name: "a template that fails every probe", files: map[string]string{fileChatTemplate: `{{ raise_exception('never') }}`}, loadErr: "renders none of the probe conversations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFolder(t, tc.files)
			cfg, err := readConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := loadTemplate(dir, cfg, cfg.BOSToken.Content, cfg.EOSToken.Content)
			if tc.loadErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.loadErr) {
					t.Fatalf("load: got %v, want an error naming %s", err, tc.loadErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.render(tc.req)
			if tc.raiseErr != "" {
				var te *TemplateError
				if !errors.As(err, &te) || te.Message != tc.raiseErr {
					t.Fatalf("got %v, want a TemplateError %q", err, tc.raiseErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestTemplateBadValues(t *testing.T) {
	tmpl := testTemplate(t, writeFolder(t, map[string]string{fileChatTemplate: `{{ messages|length }}`}))
	for _, r := range []Request{
		{Messages: []byte(`{"role":"user"}`)},
		{Messages: []byte(`[{"role":"user"`)},
		{Messages: []byte(`[] x`)},
		{Messages: []byte(`[]`), Tools: []byte(`{}`)},
		{Messages: []byte(`[]`), Kwargs: []byte(`[1]`)},
		{Messages: []byte(strings.Repeat("[", 100000) + strings.Repeat("]", 100000))},
	} {
		if out, err := tmpl.render(r); err == nil {
			t.Errorf("%.40s (tools %s, kwargs %s): rendered %q, want an error", r.Messages, r.Tools, r.Kwargs, out)
		}
	}
}

func TestJSONValueNumbers(t *testing.T) {
	tmpl := testTemplate(t, writeFolder(t, map[string]string{fileChatTemplate: `{{ messages|tojson }}`}))
	got, err := tmpl.render(Request{Messages: []byte(` [ 1 , -2, 3.25, 9007199254740993, "\u00e9\ud83d\ude00" ] `)})
	if want := `[1, -2, 3.25, 9007199254740993, "é😀"]`; err != nil || got != want {
		t.Fatalf("got %s, %v; want %s", got, err, want)
	}
}
