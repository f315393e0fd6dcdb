package extract

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"tokenmill/internal/recordtest"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
)

// scanInputs are recordtest's records and every line of our samples and the real
// JSONL datasets.
func scanInputs(t testing.TB) [][]byte {
	var in [][]byte
	for _, s := range recordtest.Records {
		in = append(in, []byte(s))
	}
	files, _ := filepath.Glob(filepath.Join(ourData, "*.jsonl"))
	for _, f := range []string{"v1_sft_demo.jsonl", "mt_bench_question.jsonl"} {
		files = append(files, filepath.Join(realData, f))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the real datasets may be absent
		}
		in = append(in, bytes.Split(data, []byte("\n"))...)
	}
	return in
}

// checkScan asserts that the scanner reads b as json.Parse does: same
// fields, same end, or that it leaves b to the decoder; and the same for
// each list field read as turns.
func checkScan(t *testing.T, x *Extractor, b []byte) {
	t.Helper()
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return
	}
	for _, p := range x.rawFields {
		*p = nil
	}
	s := newScanner(false)
	var pre []turn
	var list []byte
	end := s.scanFields(b, &x.table, &pre, &list)
	got := make([]string, len(x.rawFields))
	for i, p := range x.rawFields {
		got[i], *p = string(*p), nil
	}
	rest, err := json.Parse(b, x.target, parseFlags)
	if end < 0 {
		return
	}
	if err != nil {
		t.Fatalf("%q: the scanner read it, json.Parse: %v", b, err)
	}
	if len(b)-len(rest) != record.SkipSpace(b, end) { // json.Parse skips the space after
		t.Fatalf("%q: the scanner ends at %d, json.Parse at %d", b, end, len(b)-len(rest))
	}
	for i, p := range x.rawFields {
		if got[i] != string(*p) {
			t.Fatalf("%q: field %d: scanner %q, json.Parse %q", b, i, got[i], *p)
		}
	}
	if s.validUTF8(b[:end]) != utf8.Valid(b[:end]) {
		t.Fatalf("%q: scanner says valid UTF-8 %v", b, !s.validUTF8(b[:end]))
	}
	if list != nil {
		var parsed []turn
		if _, err := json.Parse(list, &parsed, parseFlags); err != nil {
			t.Fatalf("%q: the scanner read it as turns, json.Parse: %v", list, err)
		}
		if (len(pre) > 0 || len(parsed) > 0) && !reflect.DeepEqual(pre, parsed) {
			t.Fatalf("%q: turns read with the record: scanner %+v, json.Parse %+v", list, pre, parsed)
		}
	}
	for _, p := range x.rawFields {
		if len(*p) == 0 || (*p)[0] != '[' {
			continue
		}
		var scanned, parsed []turn
		if !s.scanTurns(*p, &scanned) {
			continue
		}
		if _, err := json.Parse(*p, &parsed, parseFlags); err != nil {
			t.Fatalf("%q: the scanner read it as turns, json.Parse: %v", *p, err)
		}
		if (len(scanned) > 0 || len(parsed) > 0) && !reflect.DeepEqual(scanned, parsed) {
			t.Fatalf("%q: turns: scanner %+v, json.Parse %+v", *p, scanned, parsed)
		}
	}
}

func TestScanMatchesDecoder(t *testing.T) {
	x, err := NewExtractor(Options{Keep: []string{"label", "extra"}})
	if err != nil {
		t.Fatal(err)
	}
	in := scanInputs(t)
	if len(in) < 100 {
		t.Fatalf("only %d inputs", len(in))
	}
	for _, b := range in {
		checkScan(t, x, b)
	}
	// The seeds the scanner must read itself (not leave to the decoder).
	for _, s := range []string{recordtest.Records[0], recordtest.Records[1], `{}`, "{\"id\":\"caf\xe9\"}"} {
		for _, p := range x.rawFields {
			*p = nil
		}
		sc := newScanner(false)
		if sc.scanFields([]byte(s), &x.table, nil, nil) < 0 {
			t.Errorf("%q: left to the decoder", s)
		}
	}
}

// TestTurnFields checks that the scanner's turn keys are turn's fields.
func TestTurnFields(t *testing.T) {
	typ := reflect.TypeOf(turn{})
	if typ.NumField() != len(turnFolds) {
		t.Fatalf("turn has %d fields, turnFolds %d", typ.NumField(), len(turnFolds))
	}
	for i := range typ.NumField() {
		name := typ.Field(i).Tag.Get("json")
		var tr turn
		p, ok := turnField(&tr, []byte(`"`+name+`"`), 0)
		if !ok || p == nil || !turnFolds[name] {
			t.Fatalf("field %s is not read", name)
		}
		*p = json.RawMessage("1")
		if string(reflect.ValueOf(tr).Field(i).Bytes()) != "1" {
			t.Fatalf("key %s goes to another field", name)
		}
	}
}

func FuzzScan(f *testing.F) {
	for _, b := range scanInputs(f) {
		f.Add(b)
	}
	x, err := NewExtractor(Options{Keep: []string{"label", "extra"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScan(t, x, b) })
}

// TestBuiltRowsScanAlike reads the rows the Parquet reader writes (the
// real files and a generated one with every kind of text) with the
// scanner that only finds string ends and with the strict one: the same
// fields, the same turns.
func TestBuiltRowsScanAlike(t *testing.T) {
	gen := writeShareGPTParquet(t, shareGPTData(300), filepath.Join(t.TempDir(), "gen.parquet"))
	files := []string{gen}
	for _, f := range []string{"ii_0625_style.parquet", "ii_3m_style.parquet"} {
		if p := filepath.Join(realData, f); fileExists(p) {
			files = append(files, p)
		}
	}
	x, err := NewExtractor(Options{Keep: []string{"label"}})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	in := jsonl.NewReader(context.Background(), nil, files, nil, jsonl.Options{})
	defer in.Close()
	for {
		rec, err := in.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Built {
			t.Fatalf("%s:%d: a Parquet row not marked as built", rec.File, rec.Line)
		}
		rows++
		var got [2][]string
		var turns [2][]turn
		for k, built := range []bool{false, true} {
			for _, p := range x.rawFields {
				*p = nil
			}
			s := newScanner(built)
			var list []byte
			if end := s.scanFields(rec.Data, &x.table, &turns[k], &list); end != len(rec.Data) || !s.validUTF8(rec.Data) {
				t.Fatalf("%s:%d (built %v): ends at %d of %d, valid UTF-8 %v", rec.File, rec.Line, built, end, len(rec.Data), s.validUTF8(rec.Data))
			}
			for _, p := range x.rawFields {
				got[k] = append(got[k], string(*p))
			}
		}
		if !reflect.DeepEqual(got[0], got[1]) || !reflect.DeepEqual(turns[0], turns[1]) {
			t.Fatalf("%s:%d: the scanners read the row differently", rec.File, rec.Line)
		}
	}
	if rows < 300 {
		t.Fatalf("only %d rows", rows)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
