package dedup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"tokenmill/internal/corpus"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

const realData = "../../../shared/data/real"

// runDedup runs the command in-process on stdin with args.
func runDedup(t testing.TB, stdin []byte, args ...string) (code int, stdout, stderr string) {
	r := testbin.InProcess(context.Background(), "dedup", Description, &Command{}, bytes.NewReader(stdin), args...)
	return r.Code, string(r.Stdout), r.Stderr
}

// fastchatPrompts converts the FastChat conversations to prompt records the
// way extract does by default: the first human turn as the user message.
func fastchatPrompts(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(realData, "fastchat_dummy_conversation.json"))
	if os.IsNotExist(err) {
		t.Skipf("real data not found at %s", realData)
	}
	if err != nil {
		t.Fatal(err)
	}
	var convs []struct {
		ID            string `json:"id"`
		Conversations []struct{ From, Value string }
	}
	if err := json.Unmarshal(data, &convs); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, c := range convs {
		var msgs []map[string]string
		for _, turn := range c.Conversations {
			if turn.From == "system" {
				msgs = append(msgs, map[string]string{"role": "system", "content": turn.Value})
			}
			if turn.From == "human" {
				msgs = append(msgs, map[string]string{"role": "user", "content": turn.Value})
				break
			}
		}
		line, err := json.Marshal(map[string]any{"id": c.ID, "messages": msgs})
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, line...), '\n')
	}
	return out
}

// corpusPrompts returns n generated prompt records and their counts.
func corpusPrompts(n int, seed uint64) ([]byte, corpus.Counts) {
	g := corpus.New(seed)
	var out []byte
	for range n {
		out = append(corpus.AppendPrompt(out, g.Next()), '\n')
	}
	return out, g.Counts()
}

// Reference normalizations, written for clarity rather than speed.
var reference = map[string]func(string) string{
	"none": func(s string) string { return s },
	"ws":   func(s string) string { return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ") },
	"lower": func(s string) string {
		return strings.ToLower(strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " "))
	},
}

// bruteForce keeps the first line of each key with a map: what dedup must
// output, byte for byte.
func bruteForce(t testing.TB, input []byte, norm func(string) string) (kept, removed []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(input), "\n"), "\n") {
		var p struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		var key strings.Builder
		for _, m := range p.Messages {
			fmt.Fprintf(&key, "%q:%q,", m.Role, norm(m.Content))
		}
		if seen[key.String()] {
			removed = append(removed, line)
			continue
		}
		seen[key.String()] = true
		kept = append(kept, line)
	}
	return kept, removed
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func TestRealDataAgreesWithBruteForce(t *testing.T) {
	input := fastchatPrompts(t)
	for _, mode := range []string{"none", "ws", "lower"} {
		wantKept, wantRemoved := bruteForce(t, input, reference[mode])
		code, stdout, stderr := runDedup(t, input, "--normalize", mode)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, stderr)
		}
		if got := lines(stdout); strings.Join(got, "\n") != strings.Join(wantKept, "\n") {
			t.Fatalf("%s: dedup kept %d lines, the brute-force map %d, or not the same ones", mode, len(got), len(wantKept))
		}
		want := fmt.Sprintf("dedup: read 500, kept %d, removed %d", len(wantKept), len(wantRemoved))
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: summary %q, want it to start %q", mode, stderr, want)
		}
	}
	// The data's own description: 52 distinct first human turns.
	if kept, _ := bruteForce(t, input, reference["none"]); len(kept) != 52 {
		t.Fatalf("the brute force finds %d distinct first turns, the data's README says 52", len(kept))
	}
}

func TestCorpusAgreesWithBruteForceAndCounts(t *testing.T) {
	n := testbin.Size(5000, 20000)
	input, counts := corpusPrompts(n, 5)
	for _, mode := range []string{"none", "ws", "lower", "aggressive"} {
		for _, exact := range []bool{false, true} {
			args := []string{"--normalize", mode, "--workers", "3"}
			if exact {
				args = append(args, "--exact")
			}
			code, stdout, stderr := runDedup(t, input, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
			got := lines(stdout)
			if removed := n - len(got); int64(removed) != counts.Removed(mode) {
				t.Errorf("%v: removed %d, the generator made %d duplicates for this mode", args, removed, counts.Removed(mode))
			}
			if norm, ok := reference[mode]; ok {
				want, _ := bruteForce(t, input, norm)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%v: output differs from the brute-force map's", args)
				}
			}
		}
	}
}

func TestOutputDoesNotDependOnWorkers(t *testing.T) {
	input, _ := corpusPrompts(8000, 9)
	var first string
	for _, w := range []string{"1", "2", "5"} {
		code, stdout, stderr := runDedup(t, input, "--normalize", "lower", "--workers", w)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if first == "" {
			first = stdout
		} else if stdout != first {
			t.Fatalf("--workers %s gave a different output", w)
		}
	}
}

// Every input line ends up exactly once in the output, the dups file or the
// rejects file; dup_of names the first record with the same key.
func TestAccountingAndDups(t *testing.T) {
	input := strings.Join([]string{
		`{"id":"a","messages":[{"role":"user","content":"one"}]}`,
		`{"id":"b","messages":[{"role":"user","content":"two"}]}`,
		`{"id":"c","messages":[{"role":"user","content":"one"}],"extra":true}`,
		`{"id":"d","messages":[{"role":"user","content":"One "}]}`,
		`not json at all`,
		``,
		`{"id":"e","messages":[]}`,
		`[1,2,3]`,
		`{"id":7,"messages":[{"role":"user","content":"three"}]}`,
		`{"id":"f","messages":[{"role":"user","content":"three"}]}` + "\r",
		`{"messages":[{"role":"user","content":"THREE"}]}`,
		`{"id":"g","messages":"oops"}`,
		`{"id":"h","messages":[{"role":"user","content":"two"}]}`,
	}, "\n") + "\n"
	dir := t.TempDir()
	dups, rejects := filepath.Join(dir, "dups.jsonl"), filepath.Join(dir, "rejects.jsonl")
	code, stdout, stderr := runDedup(t, []byte(input), "--exact", "--normalize", "lower", "--dups", dups, "--rejects", rejects)
	if code != cli.ExitRejects {
		t.Fatalf("exit %d, want 3 (rejects); stderr:\n%s", code, stderr)
	}
	wantKept := []string{`"a"`, `"b"`, `7`}
	wantDups := map[string]string{`"c"`: `"a"`, `"d"`: `"a"`, `"f"`: `7`, ``: `7`, `"h"`: `"b"`}
	wantRejects := map[int64]string{5: "malformed_json", 7: "no_key", 8: "not_an_object", 12: "bad_prompt"}

	inputLines := map[string]int{}
	for _, l := range lines(input) {
		if strings.TrimSpace(l) != "" {
			inputLines[strings.TrimSuffix(l, "\r")]++
		}
	}
	take := func(l string) {
		if inputLines[l] == 0 {
			t.Errorf("line not in the input, or seen twice: %s", l)
		}
		inputLines[l]--
	}
	var kept []string
	for _, l := range lines(stdout) {
		take(l)
		id, _ := record.FieldValue([]byte(l), "id")
		kept = append(kept, string(id))
	}
	if strings.Join(kept, " ") != strings.Join(wantKept, " ") {
		t.Errorf("kept ids %v, want %v", kept, wantKept)
	}
	dupData, _ := os.ReadFile(dups)
	for _, l := range lines(string(dupData)) {
		dupOf, _ := record.FieldValue([]byte(l), "dup_of")
		orig, err := record.WithoutFields(nil, []byte(l), "dup_of")
		if err != nil {
			t.Fatal(err)
		}
		take(string(orig))
		id, _ := record.FieldValue([]byte(l), "id")
		if want, ok := wantDups[string(id)]; !ok || want != string(dupOf) {
			t.Errorf("dups: record %s has dup_of %s, want %s", id, dupOf, want)
		}
		delete(wantDups, string(id))
	}
	if len(wantDups) != 0 {
		t.Errorf("not in the dups file: %v", wantDups)
	}
	rejData, _ := os.ReadFile(rejects)
	for _, l := range lines(string(rejData)) {
		var r struct {
			Raw    *string       `json:"raw"`
			Reject record.Reject `json:"reject"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if wantRejects[r.Reject.Line] != r.Reject.Reason || r.Reject.File != "-" {
			t.Errorf("reject %s:%d %s, want reason %q", r.Reject.File, r.Reject.Line, r.Reject.Reason, wantRejects[r.Reject.Line])
		}
		delete(wantRejects, r.Reject.Line)
		if r.Raw != nil {
			take(*r.Raw)
		} else {
			orig, _ := record.WithoutFields(nil, []byte(l), "reject")
			take(string(orig))
		}
	}
	if len(wantRejects) != 0 {
		t.Errorf("not rejected: %v", wantRejects)
	}
	for l, n := range inputLines {
		if n != 0 {
			t.Errorf("input line accounted for %d times too few: %s", n, l)
		}
	}
	if want := "dedup: read 12, kept 3, removed 5 (41.67%), false drops 0"; !strings.Contains(stderr, want) ||
		!strings.Contains(stderr, "rejected 4") || !strings.Contains(stderr, "-:5: malformed_json") {
		t.Errorf("stderr lacks %q, the rejects or their file:line:\n%s", want, stderr)
	}
}

// Bloom-mode dups are the removed input lines themselves.
func TestDupsBloomMode(t *testing.T) {
	input, counts := corpusPrompts(5000, 2)
	dups := filepath.Join(t.TempDir(), "dups.jsonl.zst")
	code, stdout, stderr := runDedup(t, input, "--dups", dups)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, wantRemoved := bruteForce(t, input, reference["none"])
	got := readAll(t, dups)
	if strings.Join(got, "\n") != strings.Join(wantRemoved, "\n") || int64(len(got)) != counts.Removed("none") {
		t.Fatalf("dups file holds %d lines, want the %d removed input lines", len(got), len(wantRemoved))
	}
	if len(lines(stdout))+len(got) != 5000 {
		t.Fatalf("kept %d + removed %d != 5000", len(lines(stdout)), len(got))
	}
}

func TestStateAgainstEarlierRun(t *testing.T) {
	all, _ := corpusPrompts(6000, 4)
	ls := lines(string(all))
	a := []byte(strings.Join(ls[:3000], "\n") + "\n")
	b := []byte(strings.Join(ls[3000:], "\n") + "\n")
	wantB, _ := bruteForce(t, all, reference["ws"])
	wantB = wantB[len(mustKept(t, a)):] // what A and B together keep, less A's part
	for _, exact := range []bool{false, true} {
		state := filepath.Join(t.TempDir(), "seen.state")
		args := []string{"--normalize", "ws", "--state", state, "--expected", "1000"}
		if exact {
			args = append(args, "--exact")
		}
		if code, _, stderr := runDedup(t, a, args...); code != 0 {
			t.Fatalf("A: exit %d: %s", code, stderr)
		}
		code, stdout, stderr := runDedup(t, b, args...)
		if code != 0 {
			t.Fatalf("B: exit %d: %s", code, stderr)
		}
		if got := lines(stdout); strings.Join(got, "\n") != strings.Join(wantB, "\n") {
			t.Fatalf("exact=%v: B against A kept %d records, want %d", exact, len(got), len(wantB))
		}
		if !strings.Contains(stderr, "2 runs") {
			t.Errorf("the state does not count its runs:\n%s", stderr)
		}
		// A again: everything was seen.
		code, stdout, _ = runDedup(t, a, args...)
		if code != 0 || stdout != "" {
			t.Fatalf("A against A+B: exit %d, kept %d", code, len(lines(stdout)))
		}
	}
}

func mustKept(t *testing.T, input []byte) []string {
	kept, _ := bruteForce(t, input, reference["ws"])
	return kept
}

func TestFieldKey(t *testing.T) {
	input := []byte(`{"id":1,"meta":{"source":"x"}}
{"id":"1","meta":{"source":"y"}}
{"id":1,"meta":{"source":"y"}}
{"id":2,"meta":{"source":"X"}}
`)
	for _, tt := range []struct {
		args []string
		kept int
	}{
		{[]string{"--key", "id"}, 2}, // 1 and "1" are one id
		{[]string{"--key", "meta.source"}, 3},
		{[]string{"--key", "meta.source", "--normalize", "lower"}, 2},
	} {
		code, stdout, stderr := runDedup(t, input, tt.args...)
		if code != 0 || len(lines(stdout)) != tt.kept {
			t.Errorf("%v: exit %d, kept %d, want %d; %s", tt.args, code, len(lines(stdout)), tt.kept, stderr)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--normalize", "upper"},
		{"--fp", "0"},
		{"--fp", "0.9"},
		{"--expected", "0"},
		{"--key", "meta..x"},
	} {
		if code, _, stderr := runDedup(t, nil, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want 2; %s", args, code, stderr)
		}
	}
}

func readAll(t *testing.T, path string) []string {
	t.Helper()
	r := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{})
	defer r.Close()
	var out []string
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		out = append(out, string(rec.Data))
	}
	return out
}

// An exact state keeps the first ids even when the run that made it wrote
// no dups file, so a later run can say what its duplicates repeat.
func TestExactStateKeepsIDs(t *testing.T) {
	state := filepath.Join(t.TempDir(), "seen.state")
	a := []byte(`{"id":"a1","messages":[{"role":"user","content":"x"}]}` + "\n" + `{"id":5,"prompt":"y"}` + "\n")
	b := []byte(`{"id":"b1","messages":[{"role":"user","content":"x"}]}` + "\n" + `{"id":"b2","prompt":"y"}` + "\n" + `{"id":"b3","prompt":"z"}` + "\n")
	if code, _, stderr := runDedup(t, a, "--exact", "--state", state); code != 0 {
		t.Fatalf("A: exit %d: %s", code, stderr)
	}
	dups := filepath.Join(t.TempDir(), "dups.jsonl")
	code, stdout, stderr := runDedup(t, b, "--exact", "--state", state, "--dups", dups)
	if code != 0 || len(lines(stdout)) != 1 {
		t.Fatalf("B: exit %d, kept %d: %s", code, len(lines(stdout)), stderr)
	}
	want := `{"id":"b1","messages":[{"role":"user","content":"x"}],"dup_of":"a1"}` + "\n" + `{"id":"b2","prompt":"y","dup_of":5}` + "\n"
	if got, _ := os.ReadFile(dups); string(got) != want {
		t.Fatalf("dups file:\n%s\nwant:\n%s", got, want)
	}
}
