package jsonl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// got is what a test sees of one Next call.
type got struct {
	data   string
	line   int64
	reason string // InputError reason, "" for a record
}

// readAll drains r, collecting records and input errors in order.
func readAll(t testing.TB, r *Reader) []got {
	t.Helper()
	var out []got
	for i := 0; ; i++ {
		if i > 1_000_000 {
			t.Fatal("reader does not terminate")
		}
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("Next returned %T %v, want *InputError or io.EOF", err, err)
			}
			out = append(out, got{line: ie.Line, reason: ie.Reason})
			continue
		}
		out = append(out, got{data: string(rec.Data), line: rec.Line})
	}
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zst(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReaderFormats(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []got
	}{
		{"jsonl", "{\"a\":1}\n{\"a\":2}\n", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 2}}},
		{"no final newline", "{\"a\":1}\n{\"a\":2}", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 2}}},
		{"crlf", "{\"a\":1}\r\n{\"a\":2}\r\n", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 2}}},
		{"blank lines skipped, numbering kept", "\n{\"a\":1}\n  \t\n\r\n{\"a\":2}\n\n", []got{{data: `{"a":1}`, line: 2}, {data: `{"a":2}`, line: 5}}},
		{"malformed line passes through for the stage to judge", "{\"a\":1}\n{oops\n{\"a\":3}\n", []got{{data: `{"a":1}`, line: 1}, {data: `{oops`, line: 2}, {data: `{"a":3}`, line: 3}}},
		{"bom", "\ufeff{\"a\":1}\n", []got{{data: `{"a":1}`, line: 1}}},
		{"empty input", "", nil},
		{"array", "[{\"a\":1},{\"a\":2}]", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 1}}},
		{"pretty array compacted, line of each element", "[\n  {\n    \"a\": \"x y\",\n    \"b\": [1, 2]\n  },\n  {\"a\": \"q\\\"]}\"}\n]\n",
			[]got{{data: `{"a":"x y","b":[1,2]}`, line: 2}, {data: `{"a":"q\"]}"}`, line: 6}}},
		{"empty array", "  [ ]  ", nil},
		{"array of scalars", "[1, \"two\", null]", []got{{data: `1`, line: 1}, {data: `"two"`, line: 1}, {data: `null`, line: 1}}},
		{"truncated array", "[{\"a\":1},\n{\"a\":", []got{{data: `{"a":1}`, line: 1}, {line: 2, reason: ReasonUnreadable}}},
		{"garbage after array", "[{\"a\":1}] x", []got{{data: `{"a":1}`, line: 1}, {line: 1, reason: ReasonUnreadable}}},
		{"missing comma", "[{\"a\":1} {\"a\":2}]", []got{{data: `{"a":1}`, line: 1}, {line: 1, reason: ReasonUnreadable}}},
		{"one array on one line is a JSON array", "[{\"a\":1},{\"a\":2}]\n\n", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 1}}},
		{"lines that are lists are JSON Lines", "[{\"role\":\"user\",\"content\":\"[a]\\\"\"}]\r\n\n[{\"role\":\"user\"}]\n{\"a\":1}",
			[]got{{data: `[{"role":"user","content":"[a]\""}]`, line: 1}, {data: `[{"role":"user"}]`, line: 3}, {data: `{"a":1}`, line: 4}}},
		{"a list line, then garbage", "[1]\nx\n", []got{{data: `[1]`, line: 1}, {data: `x`, line: 2}}},
		{"an array whose first line closes an element is one array", "[{\"a\":1},\n{\"a\":2}]\n", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 2}}},
	}
	for _, tt := range tests {
		for _, enc := range []string{"plain", "gzip", "zstd"} {
			t.Run(tt.name+"/"+enc, func(t *testing.T) {
				input := []byte(tt.input)
				switch enc {
				case "gzip":
					input = gz(t, input)
				case "zstd":
					input = zst(t, input)
				}
				r := NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{})
				out := readAll(t, r)
				if fmt.Sprint(out) != fmt.Sprint(tt.want) {
					t.Fatalf("got  %v\nwant %v", out, tt.want)
				}
			})
		}
	}
}

func TestReaderLongLines(t *testing.T) {
	long := `{"text":"` + strings.Repeat("x", 3*readBufferSize) + `"}`
	input := "{\"a\":1}\n" + long + "\n{\"a\":2}\n"
	// Under the limit: the long line arrives whole.
	out := readAll(t, NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{}))
	if len(out) != 3 || out[1].data != long || out[2].line != 3 {
		t.Fatalf("long line not read whole: %d records", len(out))
	}
	// Over the limit: reported with its line, and the stream goes on.
	out = readAll(t, NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{MaxLine: readBufferSize}))
	want := []got{{data: `{"a":1}`, line: 1}, {line: 2, reason: ReasonLineTooLong}, {data: `{"a":2}`, line: 3}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", out, want)
	}
}

// A 70 MiB line, past the old 64 MiB limit, is a record, and TakeLong
// hands its buffer over instead of copying it: a long line is held once.
func TestReaderLongLineIsOneCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 70 MiB lines")
	}
	line := hugeLine(70 << 20)
	r := NewReader(context.Background(), nil, nil, bytes.NewReader(append(line, "\n{\"a\":2}\n"...)), Options{})
	rec, err := r.Next()
	if err != nil || !bytes.Equal(rec.Data, line) {
		t.Fatalf("70 MiB line: err %v, got %d bytes want %d", err, len(rec.Data), len(line))
	}
	kept := r.TakeLong(rec)
	if len(kept) == 0 || &kept[0] != &rec.Data[0] {
		t.Fatal("TakeLong did not hand the long line's buffer over")
	}
	next, err := r.Next()
	if err != nil || string(next.Data) != `{"a":2}` || !bytes.Equal(kept, line) {
		t.Fatalf("after TakeLong: %q, %v; the line taken changed: %v", next.Data, err, !bytes.Equal(kept, line))
	}
	if r.TakeLong(next) != nil {
		t.Fatal("TakeLong handed over the read buffer of a short line")
	}
}

// hugeLine is a valid record of about n bytes.
func hugeLine(n int) []byte {
	return append(append([]byte(`{"id":"huge","t":"`), bytes.Repeat([]byte("y"), n)...), `"}`...)
}

// A record nested past MaxDepth is a malformed_json input error carrying
// the line, and the stream goes on; one at the limit is a record.
func TestReaderRefusesDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", 2<<20)
	atLimit := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	objects := strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	quoted := `{"s":"` + strings.Repeat("[", MaxDepth+5) + `"}`
	input := "{\"a\":1}\n" + deep + "\n" + atLimit + "\n" + objects + "\n" + quoted + "\n" + "[" + objects + "]\n"
	r := NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{})
	var reasons []string
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		var ie *InputError
		switch {
		case errors.As(err, &ie):
			if ie.Line != 2 && ie.Line != 6 || ie.Reason != ReasonMalformedJSON || !strings.Contains(ie.Error(), "nested deeper than 10000") {
				t.Fatalf("input error %v (reason %s)", ie, ie.Reason)
			}
			if ie.Line == 2 && len(ie.Data) != len(deep) {
				t.Fatalf("the error carries %d bytes of the line, want %d", len(ie.Data), len(deep))
			}
			reasons = append(reasons, fmt.Sprint(ie.Line, ":", ie.Reason))
		case err != nil:
			t.Fatal(err)
		default:
			reasons = append(reasons, fmt.Sprint(rec.Line, ":ok"))
		}
	}
	if got := strings.Join(reasons, " "); got != "1:ok 2:malformed_json 3:ok 4:ok 5:ok 6:malformed_json" {
		t.Fatalf("got %s", got)
	}
}

func TestReaderFilesAndErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lines := []byte("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n")
	full := gz(t, bytes.Repeat(lines, 20000))
	a := write("a.jsonl", lines)
	trunc := write("trunc.jsonl.gz", full[:len(full)/2])
	notParquet := write("fake.parquet", []byte("{\"n\":1}\n"))
	b := write("b.json.zst", zst(t, []byte(`[{"n":4}]`)))
	missing := filepath.Join(dir, "missing.jsonl")

	r := NewReader(context.Background(), nil, []string{a, trunc, notParquet, missing, "-", b}, strings.NewReader("{\"n\":0}\n"), Options{})
	var records int
	var errs []*InputError
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		var ie *InputError
		if errors.As(err, &ie) {
			errs = append(errs, ie)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.File == "" || rec.Line < 1 {
			t.Fatalf("record without position: %+v", rec)
		}
		records++
	}
	if len(errs) != 3 {
		t.Fatalf("want 3 input errors (truncated, not parquet, missing), got %v", errs)
	}
	if errs[0].File != trunc || errs[0].Line < 2 || !strings.Contains(errs[0].Error(), "truncated") {
		t.Errorf("truncated gzip: %v", errs[0])
	}
	if errs[1].File != notParquet || !errors.Is(errs[1], ErrNotParquet) {
		t.Errorf("fake parquet: %v", errs[1])
	}
	if errs[2].File != missing || !errors.Is(errs[2], os.ErrNotExist) {
		t.Errorf("missing file: %v", errs[2])
	}
	// a.jsonl (3) + the good prefix of the truncated file + stdin (1) + b (1).
	goodPrefix := int(errs[0].Line - 1)
	if want := 3 + goodPrefix + 1 + 1; records != want {
		t.Errorf("records %d, want %d", records, want)
	}
	if r.Stats.Files != 6 {
		t.Errorf("files %d, want 6", r.Stats.Files)
	}
}

func TestParquetRealData(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "real")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("real datasets not found at %s", dir)
	}
	for _, name := range []string{"ii_0625_style.parquet", "ii_3m_style.parquet"} {
		path := filepath.Join(dir, name)
		r := NewReader(context.Background(), nil, []string{path}, nil, Options{})
		out := readAll(t, r)
		if len(out) != 500 {
			t.Fatalf("%s: %d records, want 500", name, len(out))
		}
		for i, g := range out {
			if g.reason != "" || g.line != int64(i+1) || !strings.Contains(g.data, `"conversations":[{"from":"human"`) {
				t.Fatalf("%s row %d: %+v", name, i+1, g)
			}
		}
		// The same file through stdin is spooled and reads the same.
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		again := readAll(t, NewReader(context.Background(), nil, nil, f, Options{}))
		f.Close()
		if fmt.Sprint(again) != fmt.Sprint(out) {
			t.Fatalf("%s via stdin differs", name)
		}
	}
}

func FuzzReader(f *testing.F) {
	for _, seed := range []string{
		"{\"a\":1}\n{\"a\":2}\n", "[{\"a\":1},{\"b\":[1,2]}]", "\r\n\r\n", "[\"x\\\"\",", "{\"a\":\"\xff\"}\n", "PAR1garbage",
		"[{\"role\":\"user\"}]\n[{\"role\":\"x]\"}]\n", "[1]\r\n\n{}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		r := NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{MaxLine: 1 << 12})
		var total int
		for i := 0; ; i++ {
			if i > len(input)+10 {
				t.Fatalf("more results than input bytes: reader loops")
			}
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			var ie *InputError
			if err != nil && !errors.As(err, &ie) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			if err == nil {
				if bytes.ContainsAny(rec.Data, "\n") {
					t.Fatalf("record contains a newline: %q", rec.Data)
				}
				total += len(rec.Data)
			}
		}
		// Escaping a raw line break in an array string adds one byte per break.
		if total > 2*len(input) {
			t.Fatalf("records hold %d bytes, input only %d", total, len(input))
		}
	})
}

func BenchmarkReaderJSONL(b *testing.B) {
	line := `{"id":"x","conversations":[{"from":"human","value":"` + strings.Repeat("lorem ipsum ", 50) + `"}]}` + "\n"
	input := []byte(strings.Repeat(line, 20000))
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{})
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}

func BenchmarkReaderArray(b *testing.B) {
	elem := `{"id":"x","conversations":[{"from":"human","value":"` + strings.Repeat("lorem ipsum ", 50) + `"}]}`
	input := []byte("[" + strings.Repeat(elem+",\n", 19999) + elem + "]")
	b.SetBytes(int64(len(input)))
	for b.Loop() {
		r := NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{})
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}

// TestReaderDoesNotWaitForAFullBuffer: a pipe that has sent one short
// record must yield it without waiting for more input.
func TestReaderDoesNotWaitForAFullBuffer(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("{}\n"))
	done := make(chan error, 1)
	go func() {
		_, err := NewReader(context.Background(), nil, nil, pr, Options{}).Next()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader waited for more than the 3 bytes a short record needs")
	}
}

// A line longer than the read buffer is read whole when it fits and
// skipped when it does not, the same from every kind of input, each by
// its own path: a regular file by reading ahead (nothing spilled), a pipe
// or a compressed file through the spill file, and in memory when no
// temporary file can be made.
func TestReaderLongLinePaths(t *testing.T) {
	fits := `{"t":"` + strings.Repeat("f", 3*readBufferSize/2) + `"}`
	over := `{"t":"` + strings.Repeat("o", 3*readBufferSize) + `"}`
	input := []byte("{\"a\":1}\n" + fits + "\n{\"a\":2}\n" + over + "\n" + fits + "\r\n{\"a\":3}")
	want := []got{{data: `{"a":1}`, line: 1}, {data: fits, line: 2}, {data: `{"a":2}`, line: 3}, {line: 4, reason: ReasonLineTooLong},
		{data: fits, line: 5}, {data: `{"a":3}`, line: 6}}
	dir := t.TempDir()
	plain := filepath.Join(dir, "in.jsonl")
	os.WriteFile(plain, input, 0o644)
	gzipped := filepath.Join(dir, "in.jsonl.gz")
	os.WriteFile(gzipped, gz(t, input), 0o644)
	for _, tt := range []struct {
		name    string
		open    func() *Reader
		spilled bool // the spill file was used
		tmpdir  string
	}{
		{"regular file", func() *Reader {
			return NewReader(context.Background(), nil, []string{plain}, nil, Options{MaxLine: 2 * readBufferSize})
		}, false, ""},
		{"pipe", func() *Reader {
			return NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{MaxLine: 2 * readBufferSize})
		}, true, ""},
		{"gzip file", func() *Reader {
			return NewReader(context.Background(), nil, []string{gzipped}, nil, Options{MaxLine: 2 * readBufferSize})
		}, true, ""},
		{"pipe, no temporary directory", func() *Reader {
			return NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{MaxLine: 2 * readBufferSize})
		}, false, filepath.Join(dir, "missing")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.tmpdir != "" {
				t.Setenv("TMPDIR", tt.tmpdir)
			}
			r := tt.open()
			var out []got
			spilled := false
			for {
				rec, err := r.Next()
				if ls, ok := r.cur.(*lineSource); ok && ls.spill != nil {
					spilled = true
				}
				if err == io.EOF {
					break
				}
				var ie *InputError
				switch {
				case errors.As(err, &ie):
					out = append(out, got{line: ie.Line, reason: ie.Reason})
					if !strings.Contains(ie.Error(), "skipped without being held") {
						t.Errorf("message %q", ie.Error())
					}
				case err != nil:
					t.Fatal(err)
				default:
					out = append(out, got{data: string(rec.Data), line: rec.Line})
					if len(rec.Data) > readBufferSize && r.TakeLong(rec) == nil {
						t.Error("a long line was not handed over")
					}
				}
			}
			r.Close()
			if fmt.Sprint(out) != fmt.Sprint(want) {
				t.Fatalf("got %.300v\nwant %.300v", out, want)
			}
			if spilled != tt.spilled {
				t.Errorf("spill file used: %v, want %v", spilled, tt.spilled)
			}
		})
	}
}

// overlongSource is a JSONL stream with a line of n bytes between two
// small records, made as it is read (never held whole).
type overlongSource struct {
	head, tail []byte
	n, done    int64
}

func newOverlong(n int64) *overlongSource {
	return &overlongSource{head: []byte("{\"a\":1}\n{\"t\":\""), tail: []byte("\"}\n{\"a\":2}\n"), n: n}
}

func (o *overlongSource) Read(p []byte) (int, error) {
	total := int64(len(o.head)) + o.n + int64(len(o.tail))
	if o.done >= total {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && o.done < total {
		switch i := o.done; {
		case i < int64(len(o.head)):
			c := copy(p[k:], o.head[i:])
			k, o.done = k+c, o.done+int64(c)
		case i < int64(len(o.head))+o.n:
			c := int(min(int64(len(p)-k), int64(len(o.head))+o.n-i))
			for j := range c {
				p[k+j] = 'x'
			}
			k, o.done = k+c, o.done+int64(c)
		default:
			c := copy(p[k:], o.tail[i-int64(len(o.head))-o.n:])
			k, o.done = k+c, o.done+int64(c)
		}
	}
	return k, nil
}

// A 1.1 GiB line between two small records, at the default 1 GiB limit:
// skipped while streaming. The figures are what the reader allocated
// while reading it (held-bytes, an upper bound on what it held; x-buffer
// the same as a multiple of the 1 MiB read buffer), from a regular file
// (a sparse one: read ahead, nothing spilled) and from a pipe (assembled
// in the spill file up to the limit).
func BenchmarkReaderOverlongLine(b *testing.B) {
	const n = 1100 << 20
	path := filepath.Join(b.TempDir(), "overlong.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	f.Write(newOverlong(0).head)
	f.Truncate(int64(len(newOverlong(0).head)) + n) // a hole: zeros, no disk
	f.Seek(0, io.SeekEnd)
	f.Write(newOverlong(0).tail)
	f.Close()
	for _, src := range []string{"file", "pipe"} {
		b.Run(src, func(b *testing.B) {
			b.SetBytes(n)
			var alloc uint64
			for range b.N {
				var r *Reader
				if src == "file" {
					r = NewReader(context.Background(), nil, []string{path}, nil, Options{})
				} else {
					r = NewReader(context.Background(), nil, nil, newOverlong(n), Options{})
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				out := readAll(b, r)
				runtime.ReadMemStats(&after)
				r.Close()
				if len(out) != 3 || out[1].reason != ReasonLineTooLong || out[2].data != `{"a":2}` {
					b.Fatalf("got %v", out)
				}
				alloc = max(alloc, after.TotalAlloc-before.TotalAlloc)
			}
			b.ReportMetric(float64(alloc), "held-bytes")
			b.ReportMetric(float64(alloc)/readBufferSize, "x-buffer")
		})
	}
}
