package extract

import (
	"strings"
	"testing"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// The bad inputs every tool is tried on, through the binary.
func TestBadInputFiles(t *testing.T) {
	good := []byte(`{"id":"a","messages":[{"role":"user","content":"What is a prime?"}]}` + "\n" +
		`{"id":"b","conversations":[{"from":"human","value":"Name a colour."},{"from":"gpt","value":"Red."}]}` + "\n")
	chaos.TryBadInputs(t, testbin.Path("extract"), nil, good, chaos.ReaderExpect(2, map[string]chaos.Expect{
		chaos.CSV: {Code: 0, Out: 2, Stderr: "extract: read 2, wrote 2, rejected 0"},
	}))
}

// Records of the wrong kind: answers (generation and error records) give
// back their prompts, the answer left out; a record with no prompt in any
// known layout is rejected.
func TestBadInputWrongKind(t *testing.T) {
	in := `{"id":"g","messages":[{"role":"user","content":"What is a prime?"}],"output":{"text":"2","finish_reason":"stop"}}
{"id":"e","messages":[{"role":"user","content":"Name a colour."}],"error":{"status":500,"message":"x"}}
{"id":"n","score":0.5}
`
	r := run(t, strings.NewReader(in), nil)
	if r.code != 3 || !strings.Contains(r.stderr, "-:3: unknown_layout") || r.sum.wrote != 2 {
		t.Fatalf("exit %d, %+v, want 3 with the third record rejected:\n%s", r.code, r.sum, r.stderr)
	}
	for _, line := range outLines(r.stdout) {
		if strings.Contains(string(line), `"output"`) || strings.Contains(string(line), `"error"`) {
			t.Errorf("the answer came along: %s", line)
		}
	}
}
