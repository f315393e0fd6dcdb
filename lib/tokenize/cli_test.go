package tokenize

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m, "tokenize") }

func TestBinary(t *testing.T) {
	qwen3 := testbin.Tokenizers(t, "qwen3")
	noTokenizer := t.TempDir()
	for _, tt := range []struct {
		name   string
		args   []string
		env    []string
		stdin  string
		code   int
		stdout []string // each a line of stdout, in order
		stderr string   // substring
	}{
		{name: "help shows the examples", args: []string{"--help"}, stdout: nil, stderr: ""},
		{name: "messages, with the generation prompt the record asks for",
			stdin:  `{"id":1,"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}`,
			stdout: []string{`{"id":1,"rendered":"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n","ids":[151644,872,198,13048,151645,198,151644,77091,198]}`},
			stderr: "tokenize: read 1, wrote 1"},
		{name: "the generation prompt and kwargs from flags",
			args:   []string{"--add-generation-prompt", "--kwargs", `{"enable_thinking": false}`},
			stdin:  `{"id":"a","messages":[{"role":"user","content":"Hi"}]}`,
			stdout: []string{`{"id":"a","rendered":"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n","ids":[151644,872,198,13048,151645,198,151644,77091,198,151667,271,151668,271]}`}},
		{name: "a text, its special token spelt out",
			stdin:  `{"text":"Hello<|im_end|>"}`,
			stdout: []string{`{"rendered":"Hello<|im_end|>","ids":[9707,151645]}`}},
		{name: "decode", args: []string{"--decode"},
			stdin:  `{"id":7,"ids":[9707,151645]}`,
			stdout: []string{`{"id":7,"text":"Hello<|im_end|>"}`}},
		{name: "bad records are counted, the stream goes on",
			stdin: strings.Join([]string{`{"id":1}`, `not json`, `{"id":2,"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[1]}`, `{"id":3,"text":"ok"}`}, "\n"),
			code:  3, stdout: []string{`{"id":3,"rendered":"ok","ids":[562]}`},
			stderr: "rejected 3 (bad_record 1, malformed_json 1, no_input 1)"},
		{name: "ids not in the vocabulary", args: []string{"--decode"}, stdin: `{"ids":[1,99999999]}` + "\n" + `{"ids":"x"}`, code: 3,
			stderr: "rejected 2 (bad_ids 2)"},
		{name: "a folder without tokenizer.json is a usage error", args: []string{"--tokenizer", noTokenizer}, stdin: `{"text":"x"}`, code: 2,
			stderr: "no tokenizer.json"},
		{name: "--kwargs must be an object", args: []string{"--kwargs", "[1]"}, stdin: `{"text":"x"}`, code: 2, stderr: "want a JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if !slices.Contains(args, "--tokenizer") {
				args = append([]string{"--tokenizer", qwen3}, args...)
			}
			r := testbin.Run(t, t.TempDir(), strings.NewReader(tt.stdin), tt.env, "tokenize", args...)
			if r.Code != tt.code {
				t.Fatalf("exit %d, want %d\nstderr:\n%s", r.Code, tt.code, r.Stderr)
			}
			if tt.name == "help shows the examples" {
				if !strings.Contains(string(r.Stdout), "tokenize --tokenizer models/Qwen3-8B prompts.jsonl") {
					t.Errorf("--help lacks the example:\n%s", r.Stdout)
				}
				return
			}
			got := strings.Split(strings.TrimSuffix(string(r.Stdout), "\n"), "\n")
			if len(tt.stdout) == 0 {
				got = nil
			}
			if !slices.Equal(got, tt.stdout) {
				t.Errorf("stdout:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.stdout, "\n"))
			}
			if !strings.Contains(r.Stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, r.Stderr)
			}
		})
	}
}

// TestBinaryGolden sends every reference case of both real tokenizers
// through the tool (their lines are tokenize's input format: id,
// messages, tools, add_generation_prompt) and wants each case's text and
// ids exactly, every case accounted for.
func TestBinaryGolden(t *testing.T) {
	for _, model := range []string{"qwen3", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			dir := t.TempDir()
			golden := testbin.Tokenizers(t, "golden/"+model+".jsonl.gz")
			r := testbin.Run(t, dir, nil, nil, "tokenize", "--tokenizer", testbin.Tokenizers(t, model), "-o", "out.jsonl", golden)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			want := testbin.Golden[goldenLine](t, model)
			out, err := os.Open(filepath.Join(dir, "out.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			sc := bufio.NewScanner(out)
			sc.Buffer(nil, 64<<20)
			n, bad := 0, 0
			for ; sc.Scan(); n++ {
				var got goldenLine
				if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				if n >= len(want) || got.ID != want[n].ID || got.Rendered != want[n].Rendered || !slices.Equal(got.IDs, want[n].IDs) {
					if bad++; bad <= 3 {
						t.Errorf("line %d (%s) differs from the reference", n+1, got.ID)
					}
				}
			}
			if n != len(want) || bad > 0 || n != 4835 {
				t.Fatalf("%d lines for %d cases, %d differ (want 4835, none)", n, len(want), bad)
			}
			if !strings.Contains(r.Stderr, "tokenize: read 4,835, wrote 4,835") {
				t.Errorf("summary: %s", r.Stderr)
			}
		})
	}
}

type goldenLine struct {
	ID       string `json:"id"`
	Rendered string `json:"rendered"`
	IDs      []int  `json:"ids"`
}
