package stats

import (
	"strings"
	"testing"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// The bad inputs every tool is tried on, through the binary: the report
// (stdout) covers what could be read, bad lines are counted and named.
func TestBadInputFiles(t *testing.T) {
	good := []byte(`{"id":"a","messages":[{"role":"user","content":"What is a prime?"}],"output":{"text":"2","finish_reason":"stop","sample":0}}` + "\n" +
		`{"id":"b","messages":[{"role":"user","content":"Name a colour."}],"error":{"status":500,"message":"busy","sample":0}}` + "\n")
	chaos.TryBadInputs(t, testbin.Path("stats"), nil, good, chaos.ReaderExpect(-1, nil))
}

// Every kind of record is reported by kind; one without an id is rejected.
func TestBadInputWrongKind(t *testing.T) {
	in := `{"id":"p","messages":[{"role":"user","content":"What is a prime?"}]}
{"score":0.5}
`
	r := testbin.Run(t, "", strings.NewReader(in), nil, "stats", "--json")
	if r.Code != 3 || !strings.Contains(r.Stderr, "-:2: missing_id") || !strings.Contains(string(r.Stdout), `"prompt": 1`) {
		t.Fatalf("exit %d, want 3 with the second record rejected and the prompt counted:\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
