package jsonl

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// pqRealData is the directory of public datasets beside the repository.
const pqRealData = "../../../shared/data/real"

func pqWrite[T any](t testing.TB, path string, rows []T, opts ...parquet.WriterOption) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, opts...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// pqRead reads names to the end, returning each record's JSON and
// line, and every error.
func pqRead(t testing.TB, stdin io.Reader, names ...string) (recs []RawLine, errs []error) {
	t.Helper()
	r := NewReader(context.Background(), nil, names, stdin, Options{})
	defer r.Close()
	for i := 0; ; i++ {
		if i > 1e6 {
			t.Fatal("reader does not end")
		}
		rec, err := r.Next()
		if err == io.EOF {
			return recs, errs
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rec.Data = bytes.Clone(rec.Data)
		recs = append(recs, rec)
	}
}

func pqLines(recs []RawLine) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// pqTurnRow is a conversation turn as Hugging Face writes it: a struct of
// optional strings inside an optional list of optional elements.
type pqTurnRow struct {
	From  *string `parquet:"from,optional"`
	Value *string `parquet:"value,optional"`
}

func pqTurn(from, value string) *pqTurnRow { return &pqTurnRow{&from, &value} }

// The row types of TestParquetRows.
type pqScalars struct {
	ID *string `parquet:"id,optional"`
	N  *int64  `parquet:"n,optional"`
}
type pqConversations struct {
	Conv []*pqTurnRow `parquet:"conversations,optional,list"`
	ID   int64        `parquet:"id"`
}
type pqLabel struct {
	AbilityEn []string `parquet:"ability_en,optional,list"`
	AbilityZh []string `parquet:"ability_zh,optional,list"`
}
type pqLabelled struct {
	Label *pqLabel `parquet:"label,optional"`
}
type pqNumbers struct {
	B   bool     `parquet:"b"`
	D   float64  `parquet:"d"`
	Dec int32    `parquet:"dec,decimal(2:9)"`
	Day int32    `parquet:"day,date"`
	F   float32  `parquet:"f"`
	I32 int32    `parquet:"i32"`
	Raw []byte   `parquet:"raw"`
	TS  int64    `parquet:"ts,timestamp(millisecond)"`
	U64 uint64   `parquet:"u64"`
	UID [16]byte `parquet:"uid,uuid"`
}
type pqNested struct {
	M    map[string]*int64 `parquet:"m,optional"`
	IM   map[int32]string  `parquet:"im"`
	Tags []string          `parquet:"tags"`
	LL   [][]int64         `parquet:"ll,list"`
}

func TestParquetRows(t *testing.T) {
	ts := time.Date(2024, 6, 25, 12, 30, 45, 123000000, time.UTC)
	uid := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	tests := []struct {
		name  string
		write func(t testing.TB, path string)
		want  []string
	}{
		{
			name: "optional scalars and nulls",
			write: func(t testing.TB, p string) {
				pqWrite(t, p, []pqScalars{{ID: ptr("a\"b\n"), N: ptr(int64(-7))}, {}})
			},
			want: []string{`{"id":"a\"b\n","n":-7}`, `{"id":null,"n":null}`},
		},
		{
			name: "Hugging Face conversations: list of structs, null list, empty list, null element and field",
			write: func(t testing.TB, p string) {
				pqWrite(t, p, []pqConversations{
					{ID: 1, Conv: []*pqTurnRow{pqTurn("human", "Hi"), pqTurn("gpt", "Hello")}},
					{ID: 2},
					{ID: 3, Conv: []*pqTurnRow{}},
					{ID: 4, Conv: []*pqTurnRow{{From: ptr("human")}, nil}},
				})
			},
			want: []string{
				`{"conversations":[{"from":"human","value":"Hi"},{"from":"gpt","value":"Hello"}],"id":1}`,
				`{"conversations":null,"id":2}`,
				`{"conversations":[],"id":3}`,
				`{"conversations":[{"from":"human","value":null},null],"id":4}`,
			},
		},
		{
			name: "Infinity-Instruct label: a struct of string lists",
			write: func(t testing.TB, p string) {
				pqWrite(t, p, []pqLabelled{
					{Label: &pqLabel{AbilityEn: []string{"math", "logic"}, AbilityZh: []string{"数学"}}},
					{Label: &pqLabel{AbilityEn: []string{}}},
					{},
				})
			},
			want: []string{
				`{"label":{"ability_en":["math","logic"],"ability_zh":["数学"]}}`,
				`{"label":{"ability_en":[],"ability_zh":null}}`,
				`{"label":null}`,
			},
		},
		{
			name: "numbers, logical types and binary",
			write: func(t testing.TB, p string) {
				pqWrite(t, p, []pqNumbers{
					{B: true, D: 0.25, Dec: -12345, Day: 19899, F: 1.5, I32: -3, Raw: []byte("text"),
						TS: ts.UnixMilli(), U64: math.MaxUint64, UID: uid},
					{D: math.NaN(), Dec: 5, F: float32(math.Inf(1)), Raw: []byte{0xff, 0xfe}},
				})
			},
			want: []string{
				`{"b":true,"d":0.25,"dec":-123.45,"day":"2024-06-25","f":1.5,"i32":-3,"raw":"text","ts":"2024-06-25T12:30:45.123Z","u64":18446744073709551615,"uid":"123e4567-e89b-12d3-a456-426614174000"}`,
				`{"b":false,"d":null,"dec":0.05,"day":"1970-01-01","f":null,"i32":0,"raw":"//4=","ts":"1970-01-01T00:00:00Z","u64":0,"uid":"00000000-0000-0000-0000-000000000000"}`,
			},
		},
		{
			name: "maps, bare repeated fields, lists of lists",
			write: func(t testing.TB, p string) {
				pqWrite(t, p, []pqNested{
					{M: map[string]*int64{"a": ptr(int64(1)), "b": nil}, IM: map[int32]string{7: "x"}, Tags: []string{"p", "q"},
						LL: [][]int64{{1, 2}, {}, {3}}},
					{},
				})
			},
			want: []string{
				`{"m":{"a":1,"b":null},"im":{"7":"x"},"tags":["p","q"],"ll":[[1,2],[],[3]]}`,
				`{"m":null,"im":{},"tags":[],"ll":[]}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.parquet")
			tt.write(t, path)
			recs, errs := pqRead(t, nil, path)
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			if got := pqLines(recs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for i, r := range recs {
				if r.Line != int64(i+1) || r.File != path {
					t.Errorf("record %d: at %s:%d, want %s:%d", i, r.File, r.Line, path, i+1)
				}
			}
		})
	}
}

// pqRow is an Infinity-Instruct 0625 row.
type pqRow struct {
	ID            string       `parquet:"id,optional"`
	Conversations []*pqTurnRow `parquet:"conversations,optional,list"`
	Langdetect    *string      `parquet:"langdetect,optional"`
}

// pqRandomRows are Infinity-Instruct-shaped rows with every kind of
// absence: null and empty lists, null elements and fields.
func pqRandomRows(n int, seed uint64) []pqRow {
	rng := rand.New(rand.NewPCG(seed, 7))
	text := func() *string {
		if rng.IntN(10) == 0 {
			return nil
		}
		return ptr(strings.Repeat("xyz é\n\"", rng.IntN(5)))
	}
	rows := make([]pqRow, n)
	for i := range rows {
		rows[i] = pqRow{ID: fmt.Sprint("row-", i), Langdetect: text()}
		if k := rng.IntN(6); k > 0 {
			conv := []*pqTurnRow{}
			for range k - 1 {
				if rng.IntN(8) == 0 {
					conv = append(conv, nil)
				} else {
					conv = append(conv, &pqTurnRow{From: text(), Value: text()})
				}
			}
			rows[i].Conversations = conv
		}
	}
	return rows
}

// TestParquetMatchesLibraryReconstruction checks the level-walking writer
// against parquet-go's own row reconstruction, over many row groups of
// rows with every kind of null and empty list, and pages small enough that
// rows (and, in version 1 data pages, a row's values) span pages, whose
// buffers are released and reused as the rows are written.
func TestParquetMatchesLibraryReconstruction(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []parquet.WriterOption
	}{
		{"default pages", nil},
		{"small pages", []parquet.WriterOption{parquet.PageBufferSize(256)}},
		{"small v1 pages", []parquet.WriterOption{parquet.PageBufferSize(256), parquet.DataPageVersion(1)}},
		{"one row group", []parquet.WriterOption{parquet.PageBufferSize(512), parquet.MaxRowsPerRowGroup(1 << 20)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]parquet.WriterOption{parquet.MaxRowsPerRowGroup(37), parquet.Compression(&zstd.Codec{})}, tt.opts...)
			pqMatchLibrary(t, opts...)
		})
	}
}

func pqMatchLibrary(t *testing.T, opts ...parquet.WriterOption) {
	path := filepath.Join(t.TempDir(), "many.parquet")
	const n = 500
	pqWrite(t, path, pqRandomRows(n, 1), opts...)
	recs, errs := pqRead(t, nil, path)
	if len(errs) > 0 || len(recs) != n {
		t.Fatalf("read %d rows with errors %v, want %d", len(recs), errs, n)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	oracle := parquet.NewReader(f)
	for i, rec := range recs {
		want := map[string]any{}
		if err := oracle.Read(&want); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := stdjson.Unmarshal(rec.Data, &got); err != nil {
			t.Fatalf("row %d: %v: %s", i+1, err, rec.Data)
		}
		if g, w := pqNormalise(got), pqNormalise(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("row %d:\ngot  %#v\nwant %#v", i+1, g, w)
		}
		if rec.Line != int64(i+1) {
			t.Fatalf("row %d has line %d", i+1, rec.Line)
		}
	}
}

// pqNormalise maps both readers' values onto JSON's: the library leaves out
// null fields and gives nil for an empty list.
func pqNormalise(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if x != nil {
				out[k] = pqNormalise(x)
			}
		}
		return out
	case []any:
		if len(v) == 0 {
			return nil
		}
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = pqNormalise(x)
		}
		return out
	}
	return v
}

func TestParquetRealFiles(t *testing.T) {
	if _, err := os.Stat(pqRealData); err != nil {
		t.Skipf("real datasets not found at %s: %v", pqRealData, err)
	}
	var source []struct {
		ID            string           `json:"id"`
		Conversations []map[string]any `json:"conversations"`
	}
	data, err := os.ReadFile(filepath.Join(pqRealData, "fastchat_dummy_conversation.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stdjson.Unmarshal(data, &source); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file string
		id   func(i int) any
		keys []string
	}{
		{"ii_0625_style.parquet", func(i int) any { return source[i].ID }, []string{"id", "conversations", "label", "langdetect", "source"}},
		{"ii_3m_style.parquet", func(i int) any { return float64(i + 1) }, []string{"id", "conversations", "source"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			recs, errs := pqRead(t, nil, filepath.Join(pqRealData, tt.file))
			if len(errs) > 0 || len(recs) != len(source) || len(source) != 500 {
				t.Fatalf("read %d rows (errors %v), want 500 like the JSON source (%d)", len(recs), errs, len(source))
			}
			for i, rec := range recs {
				var row map[string]any
				if err := stdjson.Unmarshal(rec.Data, &row); err != nil {
					t.Fatalf("row %d: %v", i+1, err)
				}
				if row["id"] != tt.id(i) {
					t.Fatalf("row %d: id %v, want %v", i+1, row["id"], tt.id(i))
				}
				var conv []map[string]any
				for _, c := range row["conversations"].([]any) {
					conv = append(conv, c.(map[string]any))
				}
				if !reflect.DeepEqual(conv, source[i].Conversations) {
					t.Fatalf("row %d: conversations differ from the JSON source:\n%v\n%v", i+1, conv, source[i].Conversations)
				}
				if got := pqKeys(t, rec.Data); !reflect.DeepEqual(got, tt.keys) {
					t.Fatalf("row %d: fields %v, want the schema's order %v", i+1, got, tt.keys)
				}
			}
		})
	}
}

func pqKeys(t *testing.T, data []byte) []string {
	dec := stdjson.NewDecoder(bytes.NewReader(data))
	var keys []string
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip stdjson.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestParquetDamaged feeds damaged Parquet files followed by a good JSONL
// file: the good rows and the later file still come through, and each
// error names the file (and the row, once rows are being read).
func TestParquetDamaged(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	pqWrite(t, good, pqRandomRows(200, 2), parquet.MaxRowsPerRowGroup(20),
		parquet.Compression(&zstd.Codec{}))
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	okRecs, errs := pqRead(t, nil, good)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	undamaged := pqLines(okRecs)
	after := filepath.Join(dir, "after.jsonl")
	if err := os.WriteFile(after, []byte("{\"after\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Overwrite part of the pages after the first row groups, keeping the
	// footer, so that opening succeeds and reading fails part-way.
	corrupt := bytes.Clone(whole)
	for i := len(corrupt) / 2; i < len(corrupt)/2+200; i++ {
		corrupt[i] = 0xff
	}
	tests := []struct {
		name     string
		data     []byte
		minRows  int
		maxRows  int
		wantLine bool
		wantErr  error
	}{
		{"truncated: no footer", whole[:len(whole)/2], 0, 0, false, ErrNotParquet},
		{"only the magic", []byte("PAR1"), 0, 0, false, ErrNotParquet},
		{"named .parquet but JSONL", []byte("{\"a\":1}\n"), 0, 0, false, ErrNotParquet},
		{"pages overwritten", corrupt, 1, 199, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".parquet")
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			recs, errs := pqRead(t, nil, path, after)
			if len(errs) != 1 {
				t.Fatalf("got errors %v, want exactly one", errs)
			}
			var ie *InputError
			if !errors.As(errs[0], &ie) || ie.File != path || !strings.Contains(errs[0].Error(), path) {
				t.Fatalf("error %v does not name %s", errs[0], path)
			}
			if tt.wantErr != nil && !errors.Is(errs[0], tt.wantErr) {
				t.Errorf("error %v is not %v", errs[0], tt.wantErr)
			}
			if last := recs[len(recs)-1]; last.File != after {
				t.Fatalf("the file after the damaged one was not read: last record from %s", last.File)
			}
			rows := len(recs) - 1
			if rows < tt.minRows || rows > tt.maxRows {
				t.Errorf("got %d rows from the damaged file, want %d..%d", rows, tt.minRows, tt.maxRows)
			}
			if tt.wantLine && ie.Line != int64(rows+1) {
				t.Errorf("error at row %d, want the row after the last good one (%d)", ie.Line, rows+1)
			}
			if got := pqLines(recs[:rows]); !reflect.DeepEqual(got, undamaged[:rows]) {
				t.Errorf("the rows before the damage differ from the undamaged file's")
			}
		})
	}
}

// TestParquetSpooled reads Parquet that cannot be read in place: gzip
// compressed, and on stdin.
func TestParquetSpooled(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "p.parquet")
	pqWrite(t, plain, pqRandomRows(50, 3))
	want, errs := pqRead(t, nil, plain)
	if len(errs) > 0 || len(want) != 50 {
		t.Fatalf("plain: %d rows, errors %v", len(want), errs)
	}
	data, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	gzPath := filepath.Join(dir, "p.parquet.gz")
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]func() ([]RawLine, []error){
		"gzip":  func() ([]RawLine, []error) { return pqRead(t, nil, gzPath) },
		"stdin": func() ([]RawLine, []error) { return pqRead(t, bytes.NewReader(data), "-") },
	} {
		recs, errs := got()
		if len(errs) > 0 || !reflect.DeepEqual(pqLines(recs), pqLines(want)) {
			t.Errorf("%s: %d rows, errors %v; want the %d rows of the plain file", name, len(recs), errs, len(want))
		}
	}
}

func FuzzParquet(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.parquet")
	pqWrite(f, path, pqRandomRows(20, 4), parquet.MaxRowsPerRowGroup(6))
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("PAR1PAR1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := newParquetSource("f.parquet", bytes.NewReader(data), int64(len(data)), io.NopCloser(nil), &Stats{}, nil)
		if err != nil {
			if !errors.Is(err, ErrNotParquet) {
				t.Fatalf("open error %v is not ErrNotParquet", err)
			}
			return
		}
		defer src.close()
		for i := int64(1); ; i++ {
			rec, err := src.next()
			if err != nil {
				var ie *InputError
				if err != io.EOF && (!errors.As(err, &ie) || ie.Line != i) {
					t.Fatalf("error %v does not name row %d", err, i)
				}
				return
			}
			if rec.Line != i || !stdjson.Valid(rec.Data) || bytes.IndexByte(rec.Data, '\n') >= 0 {
				t.Fatalf("row %d (line %d) is not one line of JSON: %q", i, rec.Line, rec.Data)
			}
		}
	})
}

// pqBenchFile writes Infinity-Instruct-shaped rows: a string id,
// two to four turns of a few hundred bytes, langdetect.
func pqBenchFile(b *testing.B) (string, int64) {
	rows := make([]pqRow, 20000)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range rows {
		var conv []*pqTurnRow
		for k := range 2 + 2*rng.IntN(2) {
			from := "human"
			if k%2 == 1 {
				from = "gpt"
			}
			conv = append(conv, pqTurn(from, strings.Repeat("word ", 60+rng.IntN(120))))
		}
		rows[i] = pqRow{ID: fmt.Sprint("ii-", i), Conversations: conv, Langdetect: ptr("en")}
	}
	path := filepath.Join(b.TempDir(), "bench.parquet")
	pqWrite(b, path, rows, parquet.Compression(&zstd.Codec{}), parquet.MaxRowsPerRowGroup(5000))
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, st.Size()
}

// BenchmarkParquetRows reads Parquet rows as JSON (four row groups, decoded
// ahead on -cpu goroutines); MB/s is of the JSON produced (the file is
// compressed), rows/s is reported too.
func BenchmarkParquetRows(b *testing.B) {
	path, _ := pqBenchFile(b)
	var out, rows int64
	for b.Loop() {
		out = 0
		r := NewReader(context.Background(), nil, []string{path}, nil, Options{})
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			out += int64(len(rec.Data))
			rows++
		}
	}
	b.SetBytes(out)
	b.ReportAllocs()
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkParquetLibraryMaps is the same work through parquet-go's
// map[string]any reconstruction and a JSON encoder, for comparison.
func BenchmarkParquetLibraryMaps(b *testing.B) {
	path, _ := pqBenchFile(b)
	var out int64
	for b.Loop() {
		out = 0
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r := parquet.NewReader(f)
		for {
			row := map[string]any{}
			if err := r.Read(&row); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			data, err := stdjson.Marshal(row)
			if err != nil {
				b.Fatal(err)
			}
			out += int64(len(data))
		}
		f.Close()
	}
	b.SetBytes(out)
	b.ReportAllocs()
}

// TestParquetDecodersInOrder reads a file of many row groups with one to
// four decoders: the rows come out the same, in file order, with their
// row numbers.
func TestParquetDecodersInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "groups.parquet")
	const n = 700
	pqWrite(t, path, pqRandomRows(n, 7), parquet.MaxRowsPerRowGroup(23), parquet.PageBufferSize(1024))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var want []string
	for _, procs := range []int{1, 2, 3, 4} {
		runtime.GOMAXPROCS(procs)
		recs, errs := pqRead(t, nil, path)
		if len(errs) > 0 || len(recs) != n {
			t.Fatalf("%d decoders: %d rows, errors %v; want %d", procs, len(recs), errs, n)
		}
		for i, r := range recs {
			if r.Line != int64(i+1) {
				t.Fatalf("%d decoders: record %d has row %d", procs, i+1, r.Line)
			}
		}
		if want == nil {
			want = pqLines(recs)
		} else if got := pqLines(recs); !reflect.DeepEqual(got, want) {
			t.Fatalf("%d decoders give other rows than one", procs)
		}
	}
}

// TestParquetCloseEarly closes a reader a few rows into a file whose row
// groups are being decoded ahead: every goroutine it started ends.
func TestParquetCloseEarly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "groups.parquet")
	pqWrite(t, path, pqRandomRows(2000, 8), parquet.MaxRowsPerRowGroup(50))
	before := runtime.NumGoroutine()
	for range 5 {
		r := NewReader(context.Background(), nil, []string{path}, nil, Options{})
		for range 3 {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10 s after closing, %d before opening", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestParquetNoRows reads a file with a schema and no rows: no record, no
// error, and the next file is read.
func TestParquetNoRows(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "empty.parquet")
	pqWrite(t, path, []pqRow{})
	after := filepath.Join(dir, "after.jsonl")
	if err := os.WriteFile(after, []byte("{\"after\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, errs := pqRead(t, nil, path, after)
	if len(errs) > 0 || len(recs) != 1 || recs[0].File != after {
		t.Fatalf("got %d records (%v), errors %v; want only the next file's record", len(recs), pqLines(recs), errs)
	}
}

// A Parquet footer whose schema nests groups past what any layout needs
// is refused before the library builds it (100,000 levels took it past
// any machine's memory); a realistic depth is read.
func TestParquetSchemaDepth(t *testing.T) {
	footer := func(depth int) []byte {
		md := format.FileMetaData{Version: 1}
		md.Schema = append(md.Schema, format.SchemaElement{Name: "root", NumChildren: thrift.New[int32](1)})
		for i := 0; i < depth; i++ {
			md.Schema = append(md.Schema, format.SchemaElement{Name: fmt.Sprintf("g%d", i), NumChildren: thrift.New[int32](1),
				RepetitionType: thrift.New(format.Optional)})
		}
		md.Schema = append(md.Schema, format.SchemaElement{Name: "leaf", Type: thrift.New(format.ByteArray), RepetitionType: thrift.New(format.Optional)})
		b, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	depthOf := func(b []byte) error {
		var md format.FileMetaData
		if err := thrift.Unmarshal(new(thrift.CompactProtocol), b, &md); err != nil {
			t.Fatal(err)
		}
		return checkSchemaDepth(&md)
	}
	if err := depthOf(footer(4)); err != nil {
		t.Errorf("depth 4: %v", err)
	}
	for _, depth := range []int{maxSchemaDepth + 1, 100_000} {
		f := footer(depth)
		if err := depthOf(f); err == nil || !strings.Contains(err.Error(), "nests groups more than") {
			t.Errorf("depth %d: %v, want refused", depth, err)
		}
		// Through the reader, as a file: refused as not Parquet it can read.
		path := filepath.Join(t.TempDir(), "deep.parquet")
		file := append(append([]byte("PAR1"), f...), 0, 0, 0, 0, 'P', 'A', 'R', '1')
		binary.LittleEndian.PutUint32(file[len(file)-8:], uint32(len(f)))
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
		r := NewReader(context.Background(), nil, []string{path}, nil, Options{})
		_, err := r.Next()
		r.Close()
		if err == nil || !strings.Contains(err.Error(), "nests groups more than") {
			t.Errorf("depth %d through the reader: %v", depth, err)
		}
	}
}

// Page headers whose counts are past the file, their column chunk or any
// writer's are refused before the library allocates what they claim
// (2^31-1 values took 5.6 GB, 2^31-1 decompressed bytes 2.85 GB); the
// pages of a file the library wrote pass.
func TestParquetPageHeaders(t *testing.T) {
	file := func(h format.PageHeader, body int) []byte {
		hb, err := thrift.Marshal(new(thrift.CompactProtocol), &h)
		if err != nil {
			t.Fatal(err)
		}
		data := append(append([]byte("PAR1"), hb...), make([]byte, body)...)
		md := format.FileMetaData{Version: 1, NumRows: 1, Schema: []format.SchemaElement{
			{Name: "root", NumChildren: thrift.New[int32](1)},
			{Name: "prompt", Type: thrift.New(format.ByteArray), RepetitionType: thrift.New(format.Required)}}}
		md.RowGroups = []format.RowGroup{{NumRows: 1, Columns: []format.ColumnChunk{{FileOffset: 4, MetaData: format.ColumnMetaData{
			Type: format.ByteArray, PathInSchema: []string{"prompt"}, NumValues: 1, DataPageOffset: 4,
			TotalCompressedSize: int64(len(hb) + body), TotalUncompressedSize: int64(len(hb) + body)}}}}}
		fb, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, fb...)
		data = binary.LittleEndian.AppendUint32(data, uint32(len(fb)))
		return append(data, "PAR1"...)
	}
	page := func(compressed, uncompressed, values int32) format.PageHeader {
		return format.PageHeader{Type: format.DataPage, CompressedPageSize: compressed, UncompressedPageSize: uncompressed,
			DataPageHeader: thrift.New(format.DataPageHeader{NumValues: values, Encoding: format.Plain})}
	}
	for _, tc := range []struct {
		name string
		data []byte
		err  string
	}{
		{"2^31-1 values", file(page(8, 8, math.MaxInt32), 8), "more than tokenmill reads"},
		{"2^31-1 bytes decompressed", file(page(8, math.MaxInt32, 1), 8), "more than tokenmill reads"},
		{"past its column chunk", file(page(1<<20, 8, 1), 8), "past its column chunk's end"},
		{"negative", file(page(-5, 8, 1), 8), "past its column chunk's end"},
		{"a plain page", file(page(8, 8, 1), 8), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFooter(bytes.NewReader(tc.data), int64(len(tc.data)))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
	// A file the library writes, several pages and row groups, passes.
	type row struct {
		ID     string `parquet:"id"`
		Prompt string `parquet:"prompt"`
	}
	var rows []row
	for i := range 5000 {
		rows = append(rows, row{fmt.Sprint(i), strings.Repeat("word ", i%50)})
	}
	var b bytes.Buffer
	w := parquet.NewGenericWriter[row](&b, parquet.PageBufferSize(4096), parquet.MaxRowsPerRowGroup(1000))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := checkFooter(bytes.NewReader(b.Bytes()), int64(b.Len())); err != nil {
		t.Fatalf("a file the library wrote: %v", err)
	}
}
