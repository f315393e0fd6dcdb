package chaos

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Kill moments are the seed's: the same seed gives the same moments, they
// alternate between a delay and a size, and stay within their bounds.
func TestMoments(t *testing.T) {
	a := Moments(1, 9, time.Second, "/x/out.tmp-*", 1000)
	b := Moments(1, 9, time.Second, "/x/out.tmp-*", 1000)
	c := Moments(2, 9, time.Second, "/x/out.tmp-*", 1000)
	if len(a) != 9 || !equalMoments(a, b) || equalMoments(a, c) {
		t.Fatalf("moments not drawn from the seed: %v %v %v", a, b, c)
	}
	for i, m := range a {
		timed := m.Glob == ""
		if timed != (i%2 == 0) || m.After < 0 || m.After > time.Second || (!timed && (m.Size < 1 || m.Size > 1000)) {
			t.Errorf("moment %d: %v", i, m)
		}
	}
	for _, m := range Moments(1, 4, time.Second, "", 0) {
		if m.Glob != "" {
			t.Errorf("a size moment without a file to watch: %v", m)
		}
	}
}

func equalMoments(a, b []Moment) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func TestFileIsAndLitter(t *testing.T) {
	dir := t.TempDir()
	whole := []byte("a\nb\n")
	os.WriteFile(filepath.Join(dir, "whole"), whole, 0o644)
	os.WriteFile(filepath.Join(dir, "short"), whole[:2], 0o644)
	for name, want := range map[string]string{"whole": Complete, "short": Short, "none": Absent} {
		if got := FileIs(filepath.Join(dir, name), whole); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	os.WriteFile(filepath.Join(dir, "out.jsonl.tmp-123"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "dups.jsonl.tmp-9"), nil, 0o644)
	if n := Litter(t, dir); n != 2 {
		t.Errorf("litter %d, want 2", n)
	}
	if n := Litter(t, dir); n != 0 {
		t.Errorf("litter left after removal: %d", n)
	}
}

// The bad inputs are what they say they are.
func TestBadInputs(t *testing.T) {
	p := BadInputs(t, t.TempDir(), Prompts)
	read := func(name string) []byte {
		b, err := os.ReadFile(p[name])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if lines := bytes.Split(read(MalformedJSON), []byte("\n")); len(lines) != 4 || bytes.HasSuffix(lines[1], []byte("}")) {
		t.Errorf("malformed: %q", lines)
	}
	if st, _ := os.Stat(p[HugeLine]); st.Size() < int64(HugeLineBytes) || st.Size() > int64(HugeLineBytes)+(1<<20) {
		t.Errorf("huge line file of %d bytes", st.Size())
	}
	gz, err := gzip.NewReader(bytes.NewReader(read(TruncatedGzip)))
	if err == nil {
		_, err = io.Copy(io.Discard, gz)
	}
	if err == nil {
		t.Error("the truncated gzip stream decompresses whole")
	}
	zr, _ := zstd.NewReader(bytes.NewReader(read(TruncatedZstd)))
	if _, err := io.Copy(io.Discard, zr); err == nil {
		t.Error("the truncated zstd stream decompresses whole")
	}
	if bytes.HasPrefix(read(NotParquet), []byte("PAR1")) || !bytes.HasPrefix(read(BadParquet), []byte("PAR1")) || len(read(Empty)) != 0 {
		t.Error("the Parquet or empty inputs are not what they claim")
	}
	if w := ReaderExpect(-1, map[string]Expect{Empty: {Code: 3}}); len(w) != len(p) || w[Empty].Code != 3 || w[Garbage].Out != -1 {
		t.Errorf("ReaderExpect: %v", w)
	}
}
