package chaos

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"tokenmill/internal/testbin"
)

// The bad inputs every tool is tried on (see RELIABILITY.md).
const (
	MalformedJSON = "malformed JSON"
	Garbage       = "binary garbage"
	HugeLine      = "huge line"
	TruncatedGzip = "truncated gzip"
	TruncatedZstd = "truncated zstd"
	NotParquet    = "not Parquet, named .parquet"
	BadParquet    = "corrupt Parquet"
	Empty         = "empty input"
	DeepNesting   = "deep nesting"
	CSV           = "CSV file"
)

// DeepNestingBytes is the length of the deeply nested line: that many '['.
const DeepNestingBytes = 2 << 20

// Prompts are two good prompt records, for tools that read prompts.
var Prompts = []byte(`{"id":"a","messages":[{"role":"user","content":"What is a prime?"}]}` + "\n" +
	`{"id":"b","messages":[{"role":"user","content":"Name a colour."}]}` + "\n")

// HugeLineBytes is the size of the huge line: far past any real record
// and any buffer's first size, 100 MiB in the long test tier, though under
// the 1 GiB line limit (lib/jsonl tests that limit itself).
var HugeLineBytes = testbin.Size(16<<20, 100<<20)

// BadInputs writes the bad inputs into dir and returns their paths by
// name. good is a few valid JSONL records of the kind the tool reads; the
// bad inputs are built around them, so a test can check that the good
// records still come through:
//
//   - malformed JSON: good, with a line cut short inserted after its first;
//   - binary garbage: 64 KiB of seeded random bytes (NULs and newlines
//     among them);
//   - huge line: good's first line, a record of HugeLineBytes cut short
//     before its end (one long prompt, never closed: malformed), then the
//     rest of good;
//   - truncated gzip and zstd: good repeated 2,000 times, compressed, and
//     cut at two thirds;
//   - not Parquet: CSV text in a file named data.parquet;
//   - corrupt Parquet: Parquet's magic bytes around garbage;
//   - empty: a file of no bytes;
//   - deep nesting: good's first line, a line of 2 MiB of '[' (nested far
//     past the 10,000 levels a record may have), then the rest of good;
//   - CSV: two prompts as CSV (CSVPrompts) in data.csv, which extract
//     reads and every other tool refuses.
func BadInputs(t testing.TB, dir string, good []byte) map[string]string {
	t.Helper()
	first, rest, _ := bytes.Cut(good, []byte("\n"))
	first = append(first, '\n')
	garbage := GarbageBytes(64 << 10)
	many := bytes.Repeat(good, 2000)
	files := map[string][]byte{
		MalformedJSON: concat(first, []byte(`{"id": "cut", "messages": [{"role": "user", "content": "half a rec`+"\n"), rest),
		Garbage:       garbage,
		TruncatedGzip: cut(compress(t, many, false)),
		TruncatedZstd: cut(compress(t, many, true)),
		NotParquet:    []byte("id,prompt\n1,What is a prime number?\n2,Name a colour.\n"),
		BadParquet:    concat([]byte("PAR1"), garbage[:4096], []byte("\x00\x10\x00\x00PAR1")),
		Empty:         nil,
		DeepNesting:   concat(first, bytes.Repeat([]byte("["), DeepNestingBytes), []byte("\n"), rest),
		CSV:           []byte(CSVPrompts),
	}
	names := map[string]string{
		MalformedJSON: "malformed.jsonl", Garbage: "garbage.bin", TruncatedGzip: "truncated.jsonl.gz",
		TruncatedZstd: "truncated.jsonl.zst", NotParquet: "data.parquet", BadParquet: "corrupt.parquet", Empty: "empty.jsonl",
		HugeLine: "huge.jsonl", DeepNesting: "deep.jsonl", CSV: "data.csv",
	}
	paths := map[string]string{}
	for name, data := range files {
		paths[name] = filepath.Join(dir, names[name])
		if err := os.WriteFile(paths[name], data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths[HugeLine] = filepath.Join(dir, names[HugeLine])
	writeHuge(t, paths[HugeLine], first, rest)
	return paths
}

// CSVPrompts is the CSV file: a header and two prompts, one quoted.
const CSVPrompts = "id,prompt\n1,What is a prime number?\n2,\"Name a colour, any one.\"\n"

// GarbageBytes is n bytes of seeded random noise: the binary garbage.
func GarbageBytes(n int) []byte {
	rng := rand.New(rand.NewPCG(7, 11))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// cut keeps the first two thirds of b.
func cut(b []byte) []byte { return b[:len(b)*2/3] }

func compress(t testing.TB, data []byte, zst bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	if zst {
		var w *zstd.Encoder
		if w, err = zstd.NewWriter(&buf); err == nil {
			w.Write(data)
			err = w.Close()
		}
	} else {
		w := gzip.NewWriter(&buf)
		w.Write(data)
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeHuge writes first, a record whose prompt is HugeLineBytes long and
// never closed, then rest, without holding the huge line in memory.
func writeHuge(t testing.TB, path string, first, rest []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(first)
	f.WriteString(`{"id": "huge", "messages": [{"role": "user", "content": "`)
	chunk := bytes.Repeat([]byte("all work and no play "), 1<<15)
	for n := 0; n < HugeLineBytes; n += len(chunk) {
		f.Write(chunk)
	}
	f.WriteString("\n")
	if _, err := f.Write(rest); err != nil {
		t.Fatal(err)
	}
}

// Internals matches what no message for a person may hold: Go type
// names and a decoder's own words.
var Internals = regexp.MustCompile(`Go (?:value|struct)|of type |\bjson: |unmarshal|looking for beginning|invalid token|\b(?:interface \{\}|\*?[a-z]+\.[a-z]+[A-Z]\w*)\b|%!|goroutine \d`)

// Expect is what a tool must do with one bad input.
type Expect struct {
	Code int
	// Out is the number of records on stdout; -1 for a tool whose stdout
	// is a report (stats).
	Out int
	// Stderr is a substring of what the tool says.
	Stderr string
}

// ReaderExpect is what a tool that reads records through lib/jsonl does
// with each bad input, good being records of which it writes kept (-1:
// its stdout is a report, not records): reject the bad line or the
// unreadable file with its reason, keep the good records, exit 3; an
// empty input is no error. change overrides the inputs a tool treats its
// own way.
func ReaderExpect(kept int, change map[string]Expect) map[string]Expect {
	none := 0
	if kept < 0 {
		none = -1
	}
	want := map[string]Expect{
		MalformedJSON: {Code: 3, Out: kept, Stderr: "malformed.jsonl:2: malformed_json"},
		Garbage:       {Code: 3, Out: none, Stderr: "garbage.bin:1: malformed_json"},
		HugeLine:      {Code: 3, Out: kept, Stderr: "huge.jsonl:2: malformed_json"},
		TruncatedGzip: {Code: 3, Out: -1, Stderr: "unreadable: input ends early (truncated or partly written file?)"},
		TruncatedZstd: {Code: 3, Out: none, Stderr: "truncated.jsonl.zst:1: unreadable: input ends early"},
		NotParquet:    {Code: 3, Out: none, Stderr: "data.parquet: unreadable: not a valid Parquet file: the name says Parquet but the content does not start with PAR1"},
		BadParquet:    {Code: 3, Out: none, Stderr: "corrupt.parquet: unreadable: not a valid Parquet file"},
		Empty:         {Code: 0, Out: none},
		DeepNesting:   {Code: 3, Out: kept, Stderr: "deep.jsonl:2: malformed_json: nested deeper than 10000 arrays and objects"},
		CSV:           {Code: 2, Out: none, Stderr: "data.csv is not JSON Lines: CSV is read by extract"},
	}
	for k, v := range change {
		want[k] = v
	}
	return want
}

// TryBadInputs runs the binary bin with args followed by each bad input,
// in a temporary directory, and checks what it does against want, which
// must name every bad input of BadInputs.
func TryBadInputs(t *testing.T, bin string, args []string, good []byte, want map[string]Expect) {
	t.Helper()
	dir := t.TempDir()
	paths := BadInputs(t, dir, good)
	for bad := range paths {
		if _, ok := want[bad]; !ok {
			t.Errorf("%s: no expectation for the %s input", bin, bad)
		}
	}
	name := filepath.Base(bin)
	for bad, w := range want {
		t.Run(bad, func(t *testing.T) {
			cmd := exec.Command(bin, append(slices.Clone(args), paths[bad])...)
			cmd.Dir = dir
			r := testbin.Exec(t, cmd)
			out := bytes.Count(r.Stdout, []byte("\n"))
			if r.Code != w.Code || (w.Out >= 0 && out != w.Out) || !strings.Contains(r.Stderr, w.Stderr) {
				t.Errorf("%s on %s: exit %d with %d records out, want exit %d with %d, and stderr holding %q:\n%.3000s",
					name, bad, r.Code, out, w.Code, w.Out, w.Stderr, r.Stderr)
			}
			if m := Internals.FindString(r.Stderr); m != "" {
				t.Errorf("%s on %s: a message names the program's insides (%q):\n%.3000s", name, bad, m, r.Stderr)
			}
		})
	}
}
