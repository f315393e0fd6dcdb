package shard

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// The bad inputs every tool is tried on, through the binary (one shard of
// one, to stdout).
func TestBadInputFiles(t *testing.T) {
	chaos.TryBadInputs(t, testbin.Path("shard"), []string{"--select", "0/1"}, chaos.Prompts, chaos.ReaderExpect(2, nil))
}

// Records of any kind with an id (prompts, answers, errors) are sharded by
// it and written byte for byte; one with neither an id nor a prompt to
// derive one from is rejected.
func TestBadInputWrongKind(t *testing.T) {
	in := `{"id":"g","messages":[{"role":"user","content":"What is a prime?"}],"output":{"text":"2"}}
{"id":"e","error":{"status":500}}
{"score":0.5}
`
	r := testbin.Run(t, "", strings.NewReader(in), nil, "shard", "--select", "0/1")
	if r.Code != 3 || !strings.Contains(r.Stderr, "-:3: no_id") || !bytes.Equal(r.Stdout, []byte(strings.Join(strings.SplitAfter(in, "\n")[:2], ""))) {
		t.Fatalf("exit %d, stdout %q, want 3, the first two records as read and the third rejected:\n%s", r.Code, r.Stdout, r.Stderr)
	}
}

// FuzzParseSelect: an accepted --select K/N names a shard that exists,
// and reads back the same.
func FuzzParseSelect(f *testing.F) {
	for _, s := range []string{"3/8", "0/1", "8/8", "-1/4", "1/0", "/", "a/b", " 1/2", "1/2/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, n, err := parseSelect(s)
		if err != nil {
			return
		}
		if k < 0 || n < 1 || k >= n {
			t.Fatalf("%q: shard %d of %d", s, k, n)
		}
		if k2, n2, err := parseSelect(fmt.Sprintf("%d/%d", k, n)); err != nil || k2 != k || n2 != n {
			t.Fatalf("%q read as %d/%d, which reads back as %d/%d, %v", s, k, n, k2, n2, err)
		}
	})
}
