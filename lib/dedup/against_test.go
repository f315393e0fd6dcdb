package dedup

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/zeebo/xxh3"

	"tokenmill/internal/testbin"
	"tokenmill/lib/record"
)

var againstFiles = []string{"testdata/against/gsm8k-like.jsonl", "testdata/against/humaneval-like.jsonl", "testdata/against/mtbench-like.jsonl"}

func loadTestBenchmarks(t *testing.T, n int) *Benchmarks {
	t.Helper()
	b, err := LoadBenchmarks(context.Background(), againstFiles, n, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestShingles(t *testing.T) {
	for _, tc := range []struct {
		text string
		n    int
		want []string
	}{
		{"", 3, nil},
		{"one", 3, []string{"one"}},
		{"one two", 3, []string{"one two"}},
		{"one two three", 3, []string{"one two three"}},
		{"one two three four", 3, []string{"one two three", "two three four"}},
		{"a b c d e", 1, []string{"a", "b", "c", "d", "e"}},
		{"a b c d e", 2, []string{"a b", "b c", "c d", "d e"}},
	} {
		var got []string
		eachShingle(tc.text, wordStarts(nil, tc.text), tc.n, func(start, end int) bool {
			got = append(got, tc.text[start:end])
			return true
		})
		if !slices.Equal(got, tc.want) {
			t.Errorf("shingles of %q, n=%d: %q, want %q", tc.text, tc.n, got, tc.want)
		}
	}
}

func userPrompt(texts ...string) string {
	var msgs []map[string]string
	for i, s := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": s})
	}
	b, _ := json.Marshal(map[string]any{"id": "p", "messages": msgs})
	return string(b)
}

// The rule, case by case: a shared run of n words (in any case, with any
// punctuation and spacing) in any message or answer contaminates; one
// word fewer does not; a text of fewer than n words is compared whole.
func TestAgainstRule(t *testing.T) {
	b := loadTestBenchmarks(t, 13)
	const gsm, he, mt = "testdata/against/gsm8k-like.jsonl", "testdata/against/humaneval-like.jsonl", "testdata/against/mtbench-like.jsonl"
	for _, tc := range []struct {
		name  string
		line  string
		file  string // "" for clean
		bline int64
		ngram string
	}{
		{"13 words of a question, other case and punctuation", userPrompt("Here is one: a BAKER fills 14 trays... with 9 muffins each, and sells all but 17 of them! Solve it."),
			gsm, 1, "a baker fills 14 trays with 9 muffins each and sells all but"},
		{"12 words of a question", userPrompt("Consider: a baker fills 14 trays with 9 muffins each and sells all. Go."), "", 0, ""},
		{"an answer in an assistant turn", userPrompt("Hi", "Well: the pump removes 35 * 8 = <<35*8=280>>280 litres, leaving 480 - 280 = <<480-280=200>>200 in it.", "Thanks"),
			gsm, 3, "the pump removes 35 8 = <<358=280>>280 litres leaving 480 280 = <<480280=200>>200"},
		{"a HumanEval solution, reindented", userPrompt("Fix this:\ntotal = 0\nfor left, right in zip(values, values[1:]):\n  if right > left:\n    total += 1\nreturn total"),
			he, 1, "total = 0 for left right in zipvalues values1 if right > left"},
		{"a HumanEval docstring", userPrompt("Count the adjacent pairs of values in which the second is strictly greater than the first, in Go."),
			he, 1, "count the adjacent pairs of values in which the second is strictly greater"},
		{"an MT-Bench first turn", userPrompt("write a short travel blog post about a weekend spent in a small fishing village"),
			mt, 1, "write a short travel blog post about a weekend spent in a small"},
		{"an MT-Bench follow-up, shorter than n, whole", userPrompt("Now rewrite it so every sentence starts with B!"),
			mt, 1, "now rewrite it so every sentence starts with b"},
		{"a short follow-up inside a longer text", userPrompt("Now rewrite it so every sentence starts with B, please, and keep it short."), "", 0, ""},
		{"a short HumanEval solution, whole", userPrompt("return ' '.join(w.upper() if len(w) > 3 else w for w in text.split(' '))"),
			he, 2, "return joinwupper if lenw > 3 else w for w in textsplit"},
		{"an MT-Bench reference answer", userPrompt("Is it true that the hypotenuse is a diameter, so the radius is 2.5 and the area is 6.25 pi?"),
			mt, 2, "the hypotenuse is a diameter so the radius is 25 and the area"},
		{"a completion prompt", `{"id":"c","prompt":"Priya walks 3 kilometres to the library and twice as far back home by the river path"}`,
			gsm, 2, "priya walks 3 kilometres to the library and twice as far back home"},
		{"a top-level system prompt", `{"id":"s","system":"The baker made 14 * 9 = <<14*9=126>>126 muffins. The baker sold 126 - 17 = <<126-17=109>>109 muffins.","messages":[{"role":"user","content":"hi"}]}`,
			gsm, 1, "the baker made 14 9 = <<149=126>>126 muffins the baker sold 126 17"},
		{"a short prompt equal to no benchmark text", userPrompt("Now rewrite it."), "", 0, ""},
		{"clean", userPrompt("Tell me about the weather in a small fishing village on a rocky coast in the spring and the summer."), "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newAgainstChecker(b)
			got, err := c.check([]byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.file == "" && got != nil:
				t.Fatalf("contaminated by %+v, want clean", *got)
			case tc.file == "":
			case got == nil:
				t.Fatalf("clean, want contaminated by %s:%d", tc.file, tc.bline)
			case got.File != tc.file || got.Line != tc.bline || got.Ngram != tc.ngram:
				t.Fatalf("got %+v, want %s:%d %q", *got, tc.file, tc.bline, tc.ngram)
			}
			if c.overruled != 0 {
				t.Errorf("%d filter hits refuted at fp 1e-6 on a few shingles", c.overruled)
			}
		})
	}
}

// With a filter that answers yes to everything, clean prompts stay clean:
// every hit is refuted by the exact check. A hash that collides with a
// benchmark shingle's is refuted too.
func TestAgainstFalsePositivesNeverDrop(t *testing.T) {
	b := loadTestBenchmarks(t, 13)
	b.filter = bloom.New(1, 1)
	b.filter.Add([]byte("x")) // its one bit set: every test hits
	clean := userPrompt("Tell me about the weather in a small fishing village on a rocky coast in the spring and the summer.")
	c := newAgainstChecker(b)
	if got, err := c.check([]byte(clean)); got != nil || err != nil {
		t.Fatalf("clean prompt contaminated through a filter false positive: %+v, %v", got, err)
	}
	if c.overruled != 8 { // 20 words: 8 shingles of 13
		t.Fatalf("%d hits refuted, want 8 (every shingle)", c.overruled)
	}
	// A collision: the clean shingle's hash made to point at a benchmark range.
	shingle := "tell me about the weather in a small fishing village on a rocky"
	h := xxh3.HashString(shingle)
	b.grams[h] = append(b.grams[h], gramRef{text: 0, start: 0, end: int32(len(shingle))})
	if got, _ := c.check([]byte(clean)); got != nil {
		t.Fatalf("a hash collision dropped a prompt: %+v", *got)
	}
	// And a true hit still drops through the same filter.
	if got, _ := c.check([]byte(userPrompt("Priya walks 3 kilometres to the library and twice as far back home by the river path."))); got == nil {
		t.Fatal("a benchmark question went through")
	}
}

// A smaller n finds shorter shared runs.
func TestAgainstNgramSize(t *testing.T) {
	line := []byte(userPrompt("Consider: a baker fills 14 trays with 9 muffins each and sells all. Go."))
	for _, tc := range []struct {
		n     int
		dirty bool
	}{{13, false}, {12, true}, {5, true}} {
		got, err := newAgainstChecker(loadTestBenchmarks(t, tc.n)).check(line)
		if err != nil || (got != nil) != tc.dirty {
			t.Errorf("n=%d: contaminated %v (%v), want %v", tc.n, got != nil, err, tc.dirty)
		}
	}
}

// The other layouts extract reads are benchmark files too: a list of
// messages on a line, Alpaca, ShareGPT, a CSV of questions.
func TestAgainstOtherLayouts(t *testing.T) {
	dir := t.TempDir()
	const q = "Which of the planets of the solar system has the longest day of all of them when measured in hours"
	for name, data := range map[string]string{
		"xtuner.jsonl":   `[{"role":"user","content":"` + q + `"},{"role":"assistant","content":"Venus."}]` + "\n" + `[{"role":"user","content":"hi"}]` + "\n",
		"alpaca.json":    `[{"instruction":"` + q + `","input":"","output":"Venus."}]`,
		"sharegpt.jsonl": `{"conversations":[{"from":"human","value":"` + q + `"},{"from":"gpt","value":"Venus."}]}` + "\n",
		"questions.csv":  "question,answer\n\"" + q + "\",Venus\n",
	} {
		p := writeFile(t, dir, name, data)
		b, err := LoadBenchmarks(context.Background(), []string{p}, 13, 1e-6)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := newAgainstChecker(b).check([]byte(userPrompt("So: " + q + "?")))
		line := int64(1)
		if name == "questions.csv" {
			line = 2 // after the header row
		}
		if err != nil || got == nil || got.File != p || got.Line != line {
			t.Errorf("%s: contamination %+v (%v), want one from line %d", name, got, err, line)
		}
	}
}

func TestLoadBenchmarksCounts(t *testing.T) {
	b := loadTestBenchmarks(t, 13)
	// 3 + 2 + 2 records; texts: 3*2 gsm, 2*2 humaneval (prompt, solution),
	// mt-bench 2 turns + 2 turns + 2 references.
	if b.Records != 7 || len(b.texts) != 16 {
		t.Fatalf("%d records, %d texts, want 7 and 16", b.Records, len(b.texts))
	}
	if b.Short != 2 { // MT-Bench's "Now rewrite it so every sentence starts with B." and Sample/1's solution
		t.Errorf("%d short texts, want 2", b.Short)
	}
	if fp := b.FalsePositiveRate(); !(fp > 0 && fp <= 1e-6) {
		t.Errorf("false-positive rate %g, want in (0, 1e-6]", fp)
	}
}

// writeFile writes data under dir and returns its path.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Through the binary: every input id ends up once in the output, the dups
// or the rejects file; the contaminated ones carry the benchmark file, its
// record and the shared words; they leave the exit code at 0, a bad line
// makes it 3; the result is the same with one worker or four.
func TestBinaryAgainstAccounting(t *testing.T) {
	dir := t.TempDir()
	prompts := []string{
		strings.Replace(userPrompt("Tell me about rivers."), `"p"`, `"k1"`, 1),
		strings.Replace(userPrompt("Here is one: a baker fills 14 trays with 9 muffins each and sells all but 17 of them by noon."), `"p"`, `"c1"`, 1),
		strings.Replace(userPrompt("Tell me about rivers."), `"p"`, `"d1"`, 1),
		strings.Replace(userPrompt("Now rewrite it so every sentence starts with B."), `"p"`, `"c2"`, 1),
		strings.Replace(userPrompt("Here is one: a baker fills 14 trays with 9 muffins each and sells all but 17 of them by noon."), `"p"`, `"c3"`, 1),
		strings.Replace(userPrompt("Write a poem about a lighthouse."), `"p"`, `"k2"`, 1),
	}
	in := writeFile(t, dir, "in.jsonl", strings.Join(prompts, "\n")+"\n")
	bad := writeFile(t, dir, "bad.jsonl", strings.Join(prompts, "\n")+"\n{broken\n")
	args := func(tag string, workers string, input string) []string {
		return []string{"--against", againstFiles[0] + "," + againstFiles[2], "--against", againstFiles[1], "--workers", workers,
			"-o", filepath.Join(dir, tag+".out"), "--dups", filepath.Join(dir, tag+".dups"), "--rejects", filepath.Join(dir, tag+".rejects"), input}
	}
	var outputs [2]string
	for i, w := range []string{"1", "4"} {
		r := runBinary(t, nil, nil, args("w"+w, w, in)...)
		if r.code != 0 || !strings.Contains(r.stderr, "read 6, kept 2, removed 1 (16.67%), expected false drops") ||
			!strings.Contains(r.stderr, "contaminated 3 (bloom filter hits refuted by the exact check 0)") ||
			!strings.Contains(r.stderr, "against: 3 files, 7 records, 16 texts") {
			t.Fatalf("workers %s: exit %d, want 0 with 2 kept, 1 removed, 3 contaminated:\n%s", w, r.code, r.stderr)
		}
		ids := map[string]string{}
		for _, kind := range []string{"out", "dups", "rejects"} {
			for _, line := range readAll(t, filepath.Join(dir, "w"+w+"."+kind)) {
				var rec struct {
					ID     string         `json:"id"`
					Reject *againstReject `json:"reject"`
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatal(err)
				}
				if prev, ok := ids[rec.ID]; ok {
					t.Fatalf("id %s in %s and %s", rec.ID, prev, kind)
				}
				ids[rec.ID] = kind
				if kind == "rejects" && (rec.Reject == nil || rec.Reject.Reason != ReasonContaminated || rec.Reject.Against == "" || rec.Reject.Ngram == "" || rec.Reject.AgainstLine == 0) {
					t.Fatalf("reject of %s lacks the benchmark and n-gram: %s", rec.ID, line)
				}
			}
		}
		want := map[string]string{"k1": "out", "k2": "out", "d1": "dups", "c1": "rejects", "c2": "rejects", "c3": "rejects"}
		if len(ids) != len(want) {
			t.Fatalf("ids %v, want %v", ids, want)
		}
		for id, kind := range want {
			if ids[id] != kind {
				t.Fatalf("ids %v, want %v", ids, want)
			}
		}
		data, _ := os.ReadFile(filepath.Join(dir, "w"+w+".rejects"))
		outputs[i] = string(data)
	}
	if outputs[0] != outputs[1] {
		t.Fatalf("rejects differ with 1 and 4 workers:\n%s\n%s", outputs[0], outputs[1])
	}
	r := runBinary(t, nil, nil, args("bad", "2", bad)...)
	if r.code != 3 || !strings.Contains(r.stderr, "contaminated 3") || !strings.Contains(r.stderr, "rejected 1 (malformed_json 1)") {
		t.Fatalf("exit %d, want 3 with 3 contaminated and 1 rejected:\n%s", r.code, r.stderr)
	}
	if got := len(readAll(t, filepath.Join(dir, "bad.rejects"))); got != 4 {
		t.Fatalf("%d lines in the rejects file, want 4 (3 contaminated, 1 malformed)", got)
	}
}

// Hostile --against paths and contents: every one is refused with exit 2
// before anything is written.
func TestBinaryAgainstRefusals(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "in.jsonl", userPrompt("Tell me about rivers.")+"\n")
	unreadable := writeFile(t, dir, "unreadable.jsonl", `{"question":"q","answer":"a"}`+"\n")
	os.Chmod(unreadable, 0)
	for _, tc := range []struct {
		name, against, stderr string
	}{
		{"missing", filepath.Join(dir, "nope.jsonl"), "no such file"},
		{"a directory", dir, "is a directory"},
		{"under a file", filepath.Join(in, "x.jsonl"), "not a directory"},
		{"stdin", "-", "--against needs a file"},
		{"malformed line", writeFile(t, dir, "bad.jsonl", `{"question":"q","answer":"a"}`+"\n{broken\n"), "bad.jsonl:2"},
		{"no layout", writeFile(t, dir, "nolayout.jsonl", `{"task":"q","solution_code":"a"}`+"\n"), "no layout extract reads"},
		{"empty", writeFile(t, dir, "empty.jsonl", ""), "no benchmark text"},
		{"punctuation only", writeFile(t, dir, "punct.jsonl", `{"question":"?!"}`+"\n"), "no benchmark text"},
		{"truncated gzip", writeFile(t, dir, "cut.jsonl.gz", "\x1f\x8b\x08\x00\x00\x00\x00\x00"), "cut.jsonl.gz"},
		{"the output itself", filepath.Join(dir, "out.jsonl"), "same file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, rej := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "rejects.jsonl")
			if tc.name == "the output itself" {
				writeFile(t, dir, "out.jsonl", `{"question":"q"}`+"\n")
				defer os.Remove(out)
			}
			r := runBinary(t, nil, nil, "--against", tc.against, "-o", out, "--rejects", rej, "--force", in)
			if r.code != 2 || !strings.Contains(r.stderr, tc.stderr) || r.stdout != "" {
				t.Fatalf("exit %d, want 2 naming %q:\n%s", r.code, tc.stderr, r.stderr)
			}
			if _, err := os.Stat(rej); !os.IsNotExist(err) {
				t.Errorf("the rejects file was created (%v)", err)
			}
			if tc.name != "the output itself" {
				if _, err := os.Stat(out); !os.IsNotExist(err) {
					t.Errorf("the output was created (%v)", err)
				}
			}
		})
	}
	if os.Geteuid() != 0 { // root reads any file
		r := runBinary(t, nil, nil, "--against", unreadable, in)
		if r.code != 2 || !strings.Contains(r.stderr, "permission denied") || r.stdout != "" {
			t.Fatalf("unreadable: exit %d, want 2:\n%s", r.code, r.stderr)
		}
	}
	for _, bad := range [][]string{{"--against-ngram", "0"}, {"--against-fp", "0"}, {"--against-fp", "0.5"}} {
		if r := runBinary(t, nil, nil, append(bad, "--against", againstFiles[0], in)...); r.code != 2 || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("%v: exit %d, want 2:\n%s", bad, r.code, r.stderr)
		}
	}
}

// The real MT-Bench questions against prompts extracted from them and from
// Alpaca: every MT-Bench first turn is dropped as contaminated, citing its
// own record, and every prompt read is kept, removed or contaminated.
func TestBinaryAgainstRealMTBench(t *testing.T) {
	mt := testbin.RealData(t, "mt_bench_question.jsonl")
	alpaca := testbin.RealData(t, "alpaca_en_demo.json")
	dir := t.TempDir()
	var prompts []byte
	for _, src := range []string{mt, alpaca} {
		r := testbin.Run(t, "", nil, nil, "extract", "--source", filepath.Base(src), src)
		if r.Code != 0 {
			t.Fatalf("extract %s: exit %d: %s", src, r.Code, r.Stderr)
		}
		prompts = append(prompts, r.Stdout...)
	}
	in := writeFile(t, dir, "prompts.jsonl", string(prompts))
	total := len(lines(string(prompts)))
	out, dups, rej := filepath.Join(dir, "out"), filepath.Join(dir, "dups"), filepath.Join(dir, "rej")
	r := runBinary(t, nil, nil, "--against", mt, "-o", out, "--dups", dups, "--rejects", rej, in)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rejected := readAll(t, rej)
	bySource := map[string]int{}
	for _, line := range rejected {
		var rec struct {
			ID     json.RawMessage `json:"id"`
			Source string          `json:"source"`
			Reject againstReject   `json:"reject"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		bySource[rec.Source]++
		if rec.Reject.Reason != ReasonContaminated || rec.Reject.Against != mt {
			t.Fatalf("reject %s", line)
		}
		if rec.Source == "mt_bench_question.jsonl" && string(rec.ID) != strconv.FormatInt(rec.Reject.AgainstLine+80, 10) {
			t.Errorf("MT-Bench prompt %s cites line %d of the benchmark, not its own", rec.ID, rec.Reject.AgainstLine)
		}
	}
	kept, removed := len(readAll(t, out)), len(readAll(t, dups))
	if bySource["mt_bench_question.jsonl"] != 80 || kept+removed+len(rejected) != total {
		t.Fatalf("contaminated %v, want the 80 MT-Bench prompts; kept %d + removed %d + contaminated %d of %d read", bySource, kept, removed, len(rejected), total)
	}
	t.Logf("%d prompts: kept %d, removed %d, contaminated %v", total, kept, removed, bySource)
}

// FuzzAgainst: whatever the texts, checking never fails on a valid prompt;
// a prompt message that is a benchmark text (with at least one word) is
// always contaminated; and a match names words found in both canonical
// texts.
func FuzzAgainst(f *testing.F) {
	for _, seed := range []struct {
		bench, prompt string
		n             int
	}{
		{"A baker fills 14 trays with 9 muffins each.", "a BAKER fills 14 trays with 9 muffins", 5},
		{"Now rewrite it so every sentence starts with B.", "Now rewrite it so every sentence starts with B!", 13},
		{"return ' '.join(w.upper() if len(w) > 3 else w)", "return join", 2},
		{"北京 是 中国 的 首都", "北京是中国的首都", 1},
		{"?!", "...", 3},
		{"", "x", 1},
	} {
		f.Add(seed.bench, seed.prompt, seed.n)
	}
	f.Fuzz(func(t *testing.T, bench, prompt string, n int) {
		n = 1 + (n%20+20)%20
		b := &Benchmarks{n: n, files: []string{"bench.jsonl"}, grams: map[uint64][]gramRef{}}
		canon, _ := Aggressive.Append(nil, decoded(bench), nil)
		if len(canon) > 0 {
			b.add(string(canon), 0, 1, new([]int))
		}
		b.seal(1e-6)
		for _, text := range []string{prompt, bench} {
			got, err := newAgainstChecker(b).check([]byte(userPrompt(text)))
			if err != nil {
				t.Fatalf("check %q: %v", text, err)
			}
			if text == bench && len(canon) > 0 && got == nil {
				t.Fatalf("the benchmark text itself %q (canonical %q) is clean at n=%d", bench, canon, n)
			}
			if got == nil {
				continue
			}
			pc, _ := Aggressive.Append(nil, decoded(text), nil)
			if !strings.Contains(" "+string(canon)+" ", " "+got.Ngram+" ") || !strings.Contains(" "+string(pc)+" ", " "+got.Ngram+" ") {
				t.Fatalf("match %q is not words of both %q and %q", got.Ngram, canon, pc)
			}
		}
	})
}

// decoded is s as a record carries it and dedup reads it back: through
// JSON (invalid UTF-8 becomes U+FFFD).
func decoded(s string) string {
	q, _ := json.Marshal(s)
	text, _ := record.Unquote(q, nil)
	return text
}

// --against and --near in one run: the contaminated prompt goes to the
// rejects file even when it is also a near-copy of a kept one, the
// near-copy of a clean prompt to --dups, and every id lands once.
func TestBinaryAgainstWithNear(t *testing.T) {
	dir := t.TempDir()
	long := "Tell me about the rivers of the northern coast, where they rise, how long they run, which towns stand on them and what fish live in their waters in spring and in summer"
	prompts := []string{
		strings.Replace(userPrompt(long), `"p"`, `"k1"`, 1),
		strings.Replace(userPrompt(long+" please"), `"p"`, `"n1"`, 1),
		strings.Replace(userPrompt(long+". Priya walks 3 kilometres to the library and twice as far back home by the river path."), `"p"`, `"c1"`, 1),
	}
	in := writeFile(t, dir, "in.jsonl", strings.Join(prompts, "\n")+"\n")
	out, dups, rej := filepath.Join(dir, "out"), filepath.Join(dir, "dups"), filepath.Join(dir, "rej")
	r := runBinary(t, nil, nil, "--near", "--against", againstFiles[0], "-o", out, "--dups", dups, "--rejects", rej, in)
	if r.code != 0 || !strings.Contains(r.stderr, "near-duplicates 1") || !strings.Contains(r.stderr, "contaminated 1") {
		t.Fatalf("exit %d, want 0 with 1 near-duplicate and 1 contaminated:\n%s", r.code, r.stderr)
	}
	for path, want := range map[string]string{out: `"k1"`, dups: `"n1"`, rej: `"c1"`} {
		got := readAll(t, path)
		if len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("%s holds %q, want the one record %s", filepath.Base(path), got, want)
		}
	}
}
