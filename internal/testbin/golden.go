package testbin

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// update is the one -update flag of every package's tests:
// `go test ./lib/x -update` rewrites the golden files they compare with,
// and the diff is then reviewed.
var update = flag.Bool("update", false, "rewrite the golden files the tests compare with (review the diff)")

// Update reports whether the tests run with -update, for a test whose
// golden file is compared its own way (shapes kept, volatile values
// blanked) and written with WriteGolden.
func Update() bool { return *update }

// CheckGolden compares got with the golden file at path; with -update it
// writes got there instead. A difference names the first line that
// differs and shows all of got.
func CheckGolden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		WriteGolden(t, path, got)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	i := 0
	for i < len(g) && i < len(w) && bytes.Equal(g[i], w[i]) {
		i++
	}
	line := func(ls [][]byte) string {
		if i < len(ls) {
			return strconv.Quote(string(ls[i]))
		}
		return "(end of file)"
	}
	t.Errorf("%s differs at line %d (go test -update rewrites it, then review the diff):\n got %s\nwant %s\n--- got in full:\n%s",
		path, i+1, line(g), line(w), got)
}

// WriteGolden writes b to the golden file at path, making its folder.
func WriteGolden(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Golden reads a real tokenizer's reference cases
// (../shared/data/tokenizers/golden/MODEL.jsonl.gz), each line decoded
// into a T, in file order; where they are not beside the repository the
// test is skipped, saying so.
func Golden[T any](t testing.TB, model string) []T {
	t.Helper()
	f, err := os.Open(Tokenizers(t, "golden/"+model+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("golden %s line %d: %v", model, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
