package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"tokenmill/internal/testbin"
	"tokenmill/lib/jsonl"
)

// generate returns n records of seed as JSONL and the generator's counts.
func generate(t testing.TB, seed uint64, n int, prompts bool) ([]byte, Counts) {
	t.Helper()
	g := New(seed)
	var out []byte
	for range n {
		if prompts {
			out = AppendPrompt(out, g.Next())
		} else {
			out = AppendJSON(out, g.Next())
		}
		out = append(out, '\n')
	}
	return out, g.Counts()
}

type iiRecord struct {
	ID            string `json:"id"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
	Label      map[string][]string `json:"label"`
	Langdetect string              `json:"langdetect"`
	Source     string              `json:"source"`
}

func decodeAll(t *testing.T, data []byte) []iiRecord {
	t.Helper()
	var recs []iiRecord
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var r iiRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d is not valid JSON: %v\n%.200s", i+1, err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestDeterministic(t *testing.T) {
	a, ca := generate(t, 7, 3000, false)
	b, cb := generate(t, 7, 3000, false)
	if !bytes.Equal(a, b) || ca != cb {
		t.Fatal("the same seed gave different corpora")
	}
	c, _ := generate(t, 8, 3000, false)
	if bytes.Equal(a, c) {
		t.Fatal("different seeds gave the same corpus")
	}
	// A shorter run is a prefix of a longer one with the same seed.
	d, _ := generate(t, 7, 1000, false)
	if !bytes.HasPrefix(a, d) {
		t.Fatal("-n 1000 is not a prefix of -n 3000")
	}
}

func TestSchemaAndShape(t *testing.T) {
	const n = 20000
	data, _ := generate(t, 1, n, false)
	recs := decodeAll(t, data)
	if len(recs) != n {
		t.Fatalf("got %d records, want %d", len(recs), n)
	}
	var lengths []int
	multi, cjk, emojiSeen, zh := 0, 0, 0, 0
	ids := map[string]bool{}
	for _, r := range recs {
		if ids[r.ID] {
			t.Fatalf("id %s repeated", r.ID)
		}
		ids[r.ID] = true
		if len(r.Conversations) < 2 || len(r.Conversations)%2 != 0 {
			t.Fatalf("record %s has %d turns", r.ID, len(r.Conversations))
		}
		for i, c := range r.Conversations {
			if want := []string{"human", "gpt"}[i%2]; c.From != want {
				t.Fatalf("record %s turn %d is from %q, want %q", r.ID, i, c.From, want)
			}
		}
		for _, k := range []string{"ability_en", "ability_zh", "cate_ability_en", "cate_ability_zh"} {
			if _, ok := r.Label[k]; !ok {
				t.Fatalf("record %s has no label.%s", r.ID, k)
			}
		}
		if r.Langdetect == "" || r.Source == "" {
			t.Fatalf("record %s lacks langdetect or source", r.ID)
		}
		if len(r.Conversations) > 2 {
			multi++
		}
		first := r.Conversations[0].Value
		lengths = append(lengths, len([]rune(first)))
		if strings.ContainsFunc(first, func(r rune) bool { return unicode.Is(unicode.Han, r) }) {
			cjk++
		}
		if strings.ContainsFunc(first, func(r rune) bool { return r >= 0x1F300 }) {
			emojiSeen++
		}
		if r.Langdetect == "zh-cn" {
			zh++
		}
	}
	sort.Ints(lengths)
	median, longest := lengths[n/2], lengths[n-1]
	if median < 240 || median > 360 {
		t.Errorf("median first-turn length %d, want about 300", median)
	}
	if longest < 10000 || longest > 30100 {
		t.Errorf("longest first turn %d runes, want a tail beyond 10k and at most ~30k", longest)
	}
	if frac := float64(multi) / n; frac < 0.2 || frac > 0.5 {
		t.Errorf("%.2f of records are multi-turn, want about a third", frac)
	}
	if cjk < n/10 || zh < n/10 || emojiSeen < n/50 {
		t.Errorf("CJK in %d, zh-cn %d, emoji in %d of %d first turns: too few", cjk, zh, emojiSeen, n)
	}
	for _, esc := range []string{`\n`, `\t`, `\"`, `\\`, `\/`, `\u`, `\ud83d`} {
		if !bytes.Contains(data, []byte(esc)) {
			t.Errorf("no %s escape in the corpus", esc)
		}
	}
}

// The counts must say exactly how many first turns repeat under each
// normalization. These brute-force keys are written for clarity, not speed.
func TestCountsMatchBruteForce(t *testing.T) {
	n := testbin.Size(20000, 60000)
	data, counts := generate(t, 3, n, false)
	recs := decodeAll(t, data)
	ws := func(s string) string { return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ") }
	lower := func(s string) string { return strings.ToLower(ws(s)) }
	aggressive := func(s string) string {
		s = strings.ToLower(norm.NFKC.String(s))
		s = strings.Map(func(r rune) rune {
			if unicode.IsPunct(r) {
				return -1
			}
			return r
		}, s)
		return ws(s)
	}
	modes := map[string]func(string) string{
		"none": func(s string) string { return s }, "ws": ws, "lower": lower, "aggressive": aggressive,
	}
	for mode, key := range modes {
		seen := map[string]bool{}
		removed := int64(0)
		for _, r := range recs {
			k := key(r.Conversations[0].Value)
			if seen[k] {
				removed++
			}
			seen[k] = true
		}
		if want := counts.Removed(mode); removed != want {
			t.Errorf("%s: %d first turns repeat, the counts say %d", mode, removed, want)
		}
	}
	if counts.Records != int64(n) || counts.Exact == 0 || counts.Whitespace == 0 || counts.Case == 0 || counts.Punctuation == 0 {
		t.Errorf("counts %+v: every kind should occur in %d records", counts, n)
	}
	if rate := float64(counts.Exact) / float64(n); rate < 0.004 || rate > 0.008 {
		t.Errorf("exact duplicate rate %.4f, want about 0.006", rate)
	}
	if counts.Removed("bogus") != -1 {
		t.Error("an unknown mode should give -1")
	}
}

func TestPromptRecords(t *testing.T) {
	data, _ := generate(t, 5, 500, true)
	full, _ := generate(t, 5, 500, false)
	recs := decodeAll(t, full)
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var p struct {
			ID       string `json:"id"`
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(line, &p); err != nil {
			t.Fatalf("prompt %d: %v", i, err)
		}
		if p.ID != recs[i].ID || len(p.Messages) != 1 || p.Messages[0].Role != "user" ||
			p.Messages[0].Content != recs[i].Conversations[0].Value {
			t.Fatalf("prompt %d does not carry record %s's first turn", i, recs[i].ID)
		}
	}
}

func TestParquetMatchesJSONL(t *testing.T) {
	const n = 3000
	path := filepath.Join(t.TempDir(), "c.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteParquet(context.Background(), f, New(11), n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := generate(t, 11, n, false)
	want := decodeAll(t, data)

	r := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{})
	defer r.Close()
	for i := 0; ; i++ {
		rec, err := r.Next()
		if err == io.EOF {
			if i != n {
				t.Fatalf("parquet has %d rows, want %d", i, n)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var got iiRecord
		if err := json.Unmarshal(rec.Data, &got); err != nil {
			t.Fatalf("row %d: %v", i+1, err)
		}
		// An empty list reads back as null or absent; compare contents.
		for k, v := range want[i].Label {
			if len(v) == 0 && len(got.Label[k]) == 0 {
				got.Label[k] = v
			}
		}
		if !equalJSON(t, got, want[i]) {
			t.Fatalf("row %d differs:\n got %+v\nwant %+v", i+1, got, want[i])
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote \" and \\ and /", "\n\t\r\x00\x1f", "中文😀", "\u00a0\u2028"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, ascii bool) {
		if !utfValid(s) {
			return
		}
		enc := appendString(nil, s, ascii)
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, enc, err)
		}
		if got != s {
			t.Fatalf("%q round-trips to %q", s, got)
		}
		if ascii {
			for _, c := range enc {
				if c >= 0x80 {
					t.Fatalf("ascii encoding of %q has byte %#x", s, c)
				}
			}
		}
	})
}

func utfValid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// The binary: real flags, the summary on stderr, the output file.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "corpus")
	if err := testbin.Build(dir, "corpus"); err != nil {
		t.Fatal(err)
	}
	summary := regexp.MustCompile(`(?s)wrote (\d+) records .*none (\d+), ws (\d+), lower (\d+), aggressive (\d+)`)
	tests := []struct {
		name string
		args []string
		code int
		file string
	}{
		{"zstd jsonl", []string{"-n", "400", "--seed", "9", "-o", filepath.Join(dir, "c.jsonl.zst")}, 0, "c.jsonl.zst"},
		{"parquet", []string{"-n", "400", "--seed", "9", "-o", filepath.Join(dir, "c.parquet")}, 0, "c.parquet"},
		{"prompts", []string{"-n", "400", "--seed", "9", "--prompts", "-o", filepath.Join(dir, "p.jsonl")}, 0, "p.jsonl"},
		{"prompts as parquet", []string{"-n", "4", "--prompts", "-o", filepath.Join(dir, "p.parquet")}, 2, ""},
		{"conversations as parquet", []string{"-n", "4", "--conversations", "-o", filepath.Join(dir, "c.parquet")}, 2, ""},
		{"prompts and conversations", []string{"-n", "4", "--conversations", "--prompts"}, 2, ""},
		{"negative n", []string{"-n", "-1"}, 2, ""},
	}
	_, counts := generate(t, 9, 400, false)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, tt.args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if tt.code != 0 {
				return
			}
			m := summary.FindStringSubmatch(stderr.String())
			if m == nil || m[1] != "400" || m[2] != strconv.FormatInt(counts.Removed("none"), 10) ||
				m[5] != strconv.FormatInt(counts.Removed("aggressive"), 10) {
				t.Fatalf("summary does not match the generator's counts %+v:\n%s", counts, stderr.String())
			}
			r := jsonl.NewReader(context.Background(), nil, []string{filepath.Join(dir, tt.file)}, nil, jsonl.Options{})
			defer r.Close()
			rows := 0
			for {
				_, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				rows++
			}
			if rows != 400 {
				t.Fatalf("%s holds %d records, want 400", tt.file, rows)
			}
		})
	}
}

func BenchmarkGenerate(b *testing.B) {
	g := New(1)
	var buf []byte
	var bytesOut int64
	for b.Loop() {
		buf = AppendJSON(buf[:0], g.Next())
		bytesOut += int64(len(buf)) + 1
	}
	b.SetBytes(bytesOut / int64(b.N))
}
