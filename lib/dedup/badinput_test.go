package dedup

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"tokenmill/internal/chaos"
	"tokenmill/internal/testbin"
)

// The bad inputs every tool is tried on, through the binary.
func TestBadInputFiles(t *testing.T) {
	// The records repeated before the gzip cut are duplicates of the first two.
	chaos.TryBadInputs(t, testbin.Path("dedup"), nil, chaos.Prompts, chaos.ReaderExpect(2, map[string]chaos.Expect{
		chaos.TruncatedGzip: {Code: 3, Out: 2, Stderr: "unreadable: input ends early"},
	}))
}

// Records of the wrong kind: answers are deduplicated by their prompt and
// written byte for byte; a record without a prompt has no key and is
// rejected.
func TestBadInputWrongKind(t *testing.T) {
	in := `{"id":"g","messages":[{"role":"user","content":"What is a prime?"}],"output":{"text":"2"}}
{"id":"e","messages":[{"role":"user","content":"What is a prime?"}],"error":{"status":500}}
{"id":"n","score":0.5}
`
	r := runBinary(t, []byte(in), nil)
	if r.code != 3 || !strings.Contains(r.stderr, "-:3: no_key") || r.stdout != strings.SplitAfter(in, "\n")[0] {
		t.Fatalf("exit %d, stdout %q, want 3, the first answer kept and the third record rejected:\n%s", r.code, r.stdout, r.stderr)
	}
}

// A file that is not a state, given as --state, is refused before any
// output is written, and left as it was (corrupt and truncated states:
// TestBinaryStateRefusals, TestStateRefusesDamage).
func TestBadInputStateFile(t *testing.T) {
	dir := t.TempDir()
	state, out := filepath.Join(dir, "seen.state"), filepath.Join(dir, "out.jsonl")
	notState := []byte(`{"id":"a","messages":[{"role":"user","content":"hi"}]}` + "\n")
	os.WriteFile(state, notState, 0o644)
	r := runBinary(t, notState, nil, "--state", state, "-o", out)
	if r.code != 1 || !strings.Contains(r.stderr, "not a dedup state file") {
		t.Fatalf("exit %d, want 1 saying it is not a state:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the output was created (%v)", err)
	}
	if b, _ := os.ReadFile(state); string(b) != string(notState) {
		t.Errorf("the file given as state was changed")
	}
}

// FuzzLoadState: whatever a state file holds, loading it never panics nor
// allocates what the file cannot back; a state it accepts can be used.
func FuzzLoadState(f *testing.F) {
	for _, exact := range []bool{false, true} {
		settings := Settings{Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Exact: exact}
		s := NewSet(100, 0.01, exact)
		fillSet(s, "x", 150)
		path := filepath.Join(f.TempDir(), "seed.state")
		if err := SaveState(path, s, settings, Totals{Runs: 1}); err != nil {
			f.Fatal(err)
		}
		good, _ := os.ReadFile(path)
		f.Add(good, exact)
		f.Add(good[:len(good)/2], exact)
		f.Add(good[:len(stateMagic)+40], exact)
	}
	f.Add([]byte(`{"id":1}`), false)
	f.Fuzz(func(t *testing.T, data []byte, exact bool) {
		settings := Settings{Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Exact: exact}
		s, _, err := readState(bufio.NewReader(bytes.NewReader(data)), int64(len(data)), "fuzz.state", settings)
		if err != nil {
			return
		}
		if s == nil || s.Filter == nil || s.Exact() != exact {
			t.Fatalf("accepted a state that is not usable: %+v", s)
		}
		s.Seen(xxh3.Hash128(data), []byte("probe"))
	})
}
