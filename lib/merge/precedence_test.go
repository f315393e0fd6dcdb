package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// answer makes a generation or error record for id x whose text (or error
// message) is label; kind is a finish_reason, or "error".
func answer(id string, sample int, kind, label string) string {
	if kind == "error" {
		return fmt.Sprintf(`{"id": %s, "prompt": "p", "error": {"status": 500, "message": %q, "attempts": 1, "retriable": true, "sample": %d}}`, id, label, sample)
	}
	finish := kind
	if kind != "null" {
		finish = strconv.Quote(kind)
	}
	if kind == "escaped-stop" {
		finish = `"st\u006fp"`
	}
	return fmt.Sprintf(`{"id": %s, "prompt": "p", "output": {"text": %q, "finish_reason": %s, "sample": %d}}`, id, label, finish, sample)
}

// label reads back which record won.
func label(t *testing.T, line string) string {
	t.Helper()
	var v struct {
		Output *struct{ Text string }
		Error  *struct{ Message string }
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if v.Output != nil {
		return v.Output.Text
	}
	return v.Error.Message
}

// TestPrecedence: one (id, sample) answered several times, in one file or
// several; which record is written, and which goes to --errors.
func TestPrecedence(t *testing.T) {
	tests := []struct {
		name       string
		files      [][]string // kind:label in read order, per file
		dropLength bool
		out, errs  string // winning label in output / errors file ("" none)
	}{
		{"answer beats earlier error", [][]string{{"error:e", "stop:s"}}, false, "s", ""},
		{"answer beats later error", [][]string{{"stop:s", "error:e"}}, false, "s", ""},
		{"stop beats earlier length", [][]string{{"length:l", "stop:s"}}, false, "s", ""},
		{"stop beats later length", [][]string{{"stop:s", "length:l"}}, false, "s", ""},
		{"length beats earlier abort", [][]string{{"abort:a", "length:l"}}, false, "l", ""},
		{"length beats later abort", [][]string{{"length:l", "abort:a"}}, false, "l", ""},
		{"abort beats error, but is no good answer", [][]string{{"abort:a", "error:e"}}, false, "", "a"},
		{"among stops the last wins", [][]string{{"stop:first", "stop:second", "stop:third"}}, false, "third", ""},
		{"among errors the last wins", [][]string{{"error:first", "error:second"}}, false, "", "second"},
		{"among lengths the last wins", [][]string{{"length:first", "length:second"}}, false, "second", ""},
		{"unknown finish reasons rank with abort", [][]string{{"content_filter:f", "abort:a"}}, false, "", "a"},
		{"abort then unknown: last of equals", [][]string{{"abort:a", "content_filter:t"}}, false, "", "t"},
		{"tool calls are a complete answer", [][]string{{"tool_calls:t", "error:e"}}, false, "t", ""},
		{"tool calls beat later length", [][]string{{"tool_calls:t", "length:l"}}, false, "t", ""},
		{"tool calls and stop: last of equals", [][]string{{"stop:s", "tool_calls:t"}}, false, "t", ""},
		{"--drop-length: tool calls still good", [][]string{{"length:l"}, {"tool_calls:t"}}, true, "t", ""},
		{"empty finish reason is not good", [][]string{{"stop:s", ":empty"}}, false, "s", ""},
		{"null finish reason ranks with abort", [][]string{{"null:n", "error:e"}}, false, "", "n"},
		{"escaped stop is stop", [][]string{{"escaped-stop:s", "length:l"}}, false, "s", ""},
		{"later file wins among equals", [][]string{{"stop:a"}, {"stop:b"}}, false, "b", ""},
		{"earlier file's better answer wins", [][]string{{"stop:a"}, {"length:b"}, {"error:c"}}, false, "a", ""},
		{"--drop-length: length beats error but is not written", [][]string{{"length:l", "error:e"}}, true, "", "l"},
		{"--drop-length: stop still beats length", [][]string{{"stop:s"}, {"length:l"}}, true, "s", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files [][]string
			for _, f := range tt.files {
				var lines []string
				for _, a := range f {
					kind, lab, _ := strings.Cut(a, ":")
					lines = append(lines, answer(`"x"`, 0, kind, lab))
				}
				files = append(files, lines)
			}
			var flags []string
			if tt.dropLength {
				flags = append(flags, "--drop-length")
			}
			checkWinner(t, files, flags, tt.out, tt.errs, label)
		})
	}
}

// checkWinner merges files (each a list of lines) with flags and --errors,
// and checks which record of the one (id, sample) is written (its label
// out, "" for none) and which goes to the errors file.
func checkWinner(t *testing.T, files [][]string, flags []string, out, errs string, label func(*testing.T, string) string) {
	t.Helper()
	dir := t.TempDir()
	var args []string
	for i, f := range files {
		args = append(args, writeLines(t, filepath.Join(dir, fmt.Sprintf("f%d.jsonl", i)), f))
	}
	errsPath := filepath.Join(dir, "errors.jsonl")
	args = append(append(args, "--errors", errsPath), flags...)
	code, stdout, stderr := runMerge(t, context.Background(), nil, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	errText, _ := os.ReadFile(errsPath)
	for _, c := range []struct{ what, text, want string }{{"output", stdout, out}, {"errors file", string(errText), errs}} {
		lines := splitLines(c.text)
		switch {
		case c.want == "" && len(lines) != 0:
			t.Errorf("%s holds %v, want nothing", c.what, lines)
		case c.want != "" && len(lines) != 1:
			t.Errorf("%s holds %d records, want 1 (%s)", c.what, len(lines), c.want)
		case c.want != "" && label(t, lines[0]) != c.want:
			t.Errorf("%s holds %q, want %q", c.what, label(t, lines[0]), c.want)
		}
	}
}

// bruteRun is a random run: prompts, and generation and error files that
// answer them (and a few stray ids) repeatedly, in every kind.
type bruteRun struct {
	prompts []string   // prompt lines
	ids     []string   // JSON id of each prompt
	files   [][]string // answer files, in read order
}

func newBruteRun(seed int64, nPrompts, samples, nAnswers int) bruteRun {
	rng := rand.New(rand.NewSource(seed))
	var r bruteRun
	for i := 0; i < nPrompts; i++ {
		id := strconv.Quote(fmt.Sprintf("p-%04d", rng.Intn(100000)))
		if i%4 == 0 {
			id = strconv.Itoa(rng.Intn(2000) - 100)
		}
		r.ids = append(r.ids, id)
		r.prompts = append(r.prompts, fmt.Sprintf(`{"id": %s, "messages": [{"role": "user", "content": "question %d"}]}`, id, i))
	}
	kinds := []string{"stop", "stop", "stop", "length", "abort", "error", "error"}
	r.files = make([][]string, 5)
	for n := 0; n < nAnswers; n++ {
		f := rng.Intn(len(r.files))
		id := r.ids[rng.Intn(len(r.ids))]
		if rng.Intn(50) == 0 {
			id = strconv.Quote(fmt.Sprintf("stray-%d", rng.Intn(20)))
		}
		// Padding makes records big enough that a small budget spills often.
		lab := fmt.Sprintf("f%d-n%d-%s", f, n, strings.Repeat("x", rng.Intn(300)))
		r.files[f] = append(r.files[f], answer(id, rng.Intn(samples), kinds[rng.Intn(len(kinds))], lab))
	}
	return r
}

// bruteBest is the best record seen of one (id, sample).
type bruteBest struct {
	rank, order, seq int
	line             string
	id               string
	numeric          bool
	sample           int
}

// bruteRank is a record's id, rank and sample, read the plain way.
func bruteRank(t *testing.T, l string) (id json.RawMessage, rank, sample int) {
	var v struct {
		ID     json.RawMessage
		Output *struct {
			FinishReason *string `json:"finish_reason"`
			Sample       int
		}
		Error *struct{ Sample int }
	}
	if err := json.Unmarshal([]byte(l), &v); err != nil {
		t.Fatal(err)
	}
	rank = int(rankError)
	if v.Output == nil {
		return v.ID, rank, v.Error.Sample
	}
	sample, rank = v.Output.Sample, int(rankAbort)
	if fr := v.Output.FinishReason; fr != nil && *fr == "stop" {
		rank = int(rankStop)
	} else if fr != nil && *fr == "length" {
		rank = int(rankLength)
	}
	return v.ID, rank, sample
}

// sortBest orders the keys as merge writes them: in input order, or by
// id (integers first, numerically) then sample.
func sortBest(all []*bruteBest, sortByID bool) {
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if !sortByID {
			return a.order < b.order
		}
		if a.numeric != b.numeric {
			return a.numeric
		}
		if a.numeric {
			x, _ := strconv.Atoi(a.id)
			y, _ := strconv.Atoi(b.id)
			if x != y {
				return x < y
			}
		} else if a.id != b.id {
			return a.id < b.id
		}
		return a.sample < b.sample
	})
}

// expected computes, the slow and obvious way, what merge must write.
func (r bruteRun) expected(t *testing.T, samples int, dropLength, sortByID, missing bool) (out, errs []string) {
	good := rankLength
	if dropLength {
		good = rankStop
	}
	keys := map[string]*bruteBest{}
	seq := 0
	keyOf := func(id string, sample int) string { return strings.Trim(id, `"`) + "\x00" + strconv.Itoa(sample) }
	if missing {
		for i, l := range r.prompts {
			for s := 0; s < samples; s++ {
				k := keyOf(r.ids[i], s)
				if keys[k] == nil {
					line := strings.TrimSuffix(l, "}") + `,"sample":` + strconv.Itoa(s) + "}"
					if samples == 1 {
						line = l
					}
					keys[k] = &bruteBest{order: seq, line: line, id: strings.Trim(r.ids[i], `"`), numeric: r.ids[i][0] != '"', sample: s}
				}
				seq++
			}
		}
	}
	for _, f := range r.files {
		for _, l := range f {
			id, rank, sample := bruteRank(t, l)
			k := keyOf(string(id), sample)
			b := keys[k]
			if b == nil {
				b = &bruteBest{order: seq, id: strings.Trim(string(id), `"`), numeric: id[0] != '"', sample: sample}
				keys[k] = b
			}
			if rank >= b.rank {
				b.rank, b.seq = rank, seq
				if !missing {
					b.line = l
				}
			}
			seq++
		}
	}
	all := make([]*bruteBest, 0, len(keys))
	for _, b := range keys {
		all = append(all, b)
	}
	sortBest(all, sortByID)
	for _, b := range all {
		switch {
		case missing && b.line != "" && b.rank < int(good):
			out = append(out, b.line)
		case missing:
		case b.rank >= int(good):
			out = append(out, b.line)
		default:
			errs = append(errs, b.line)
		}
	}
	return out, errs
}

// TestAgainstBruteForce checks merge on random runs against the obvious
// computation, in memory and with budgets small enough to spill through
// several partition levels; every (id, sample) must end up exactly once
// in the output or the errors file.
func TestAgainstBruteForce(t *testing.T) {
	const samples = 2
	run := newBruteRun(42, 300, samples, 2500)
	dir := t.TempDir()
	promptsPath := writeLines(t, filepath.Join(dir, "prompts.jsonl"), run.prompts)
	var inputs []string
	for i, f := range run.files {
		inputs = append(inputs, writeLines(t, filepath.Join(dir, fmt.Sprintf("gen-%d.jsonl", i)), f))
	}
	tests := []struct {
		name                        string
		args                        []string
		dropLength, sortBy, missing bool
	}{
		{"first-seen order", nil, false, false, false},
		{"sorted, drop length", []string{"--sort", "--drop-length"}, true, true, false},
		{"missing", []string{"--prompts", promptsPath, "--missing", "--samples", "2"}, false, false, true},
		{"missing sorted", []string{"--prompts", promptsPath, "--missing", "--samples", "2", "--sort", "--drop-length"}, true, true, true},
	}
	for _, tt := range tests {
		wantOut, wantErrs := run.expected(t, samples, tt.dropLength, tt.sortBy, tt.missing)
		if len(wantOut) == 0 || (!tt.missing && len(wantErrs) == 0) {
			t.Fatalf("%s: the random run exercises nothing (%d out, %d errors)", tt.name, len(wantOut), len(wantErrs))
		}
		for _, memory := range []string{"512MiB", "64KiB", "4KiB"} {
			t.Run(tt.name+"/"+memory, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "out.jsonl")
				args := append([]string{"--memory", memory, "-o", out}, tt.args...)
				errsPath := ""
				if !tt.missing {
					errsPath = filepath.Join(t.TempDir(), "errors.jsonl")
					args = append(args, "--errors", errsPath)
				}
				code, _, stderr := runMerge(t, context.Background(), nil, append(args, inputs...)...)
				if code != 0 {
					t.Fatalf("exit %d\n%s", code, stderr)
				}
				if spilled := spilledClause.MatchString(stderr); spilled != (memory != "512MiB") {
					t.Errorf("spilled: %v with --memory %s\n%s", spilled, memory, stderr)
				}
				got, _ := os.ReadFile(out)
				compareLines(t, "output", splitLines(string(got)), wantOut)
				if errsPath != "" {
					gotErrs, _ := os.ReadFile(errsPath)
					compareLines(t, "errors file", splitLines(string(gotErrs)), wantErrs)
				}
			})
		}
	}
}

func compareLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s record %d:\n got  %.150s\n want %.150s", what, i+1, got[i], want[i])
			return
		}
	}
}
