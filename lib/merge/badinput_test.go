package merge

import (
	"strings"
	"testing"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// The bad inputs every tool is tried on, through the binary.
func TestBadInputFiles(t *testing.T) {
	good := []byte(answer(`"a"`, 0, "stop", "two") + "\n" + answer(`"b"`, 0, "error", "busy") + "\n" + answer(`"c"`, 0, "length", "red") + "\n")
	// a's and c's answers come out, b's error is counted as missing; the
	// records repeated before the gzip cut replace each other.
	chaos.TryBadInputs(t, testbin.Path("merge"), nil, good, chaos.ReaderExpect(2, map[string]chaos.Expect{
		chaos.TruncatedGzip: {Code: 3, Out: 2, Stderr: "unreadable: input ends early"},
	}))
}

// Prompt records among the answers are rejected (not_a_generation); the
// answers around them are merged.
func TestBadInputWrongKind(t *testing.T) {
	in := `{"id":"p","messages":[{"role":"user","content":"What is a prime?"}]}
` + answer(`"a"`, 0, "stop", "two") + "\n"
	r := testbin.Run(t, "", strings.NewReader(in), nil, "merge")
	if r.Code != 3 || !strings.Contains(r.Stderr, "-:1: not_a_generation: neither output nor error") || string(r.Stdout) != answer(`"a"`, 0, "stop", "two")+"\n" {
		t.Fatalf("exit %d, stdout %q, want 3 with the prompt rejected and the answer out:\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
