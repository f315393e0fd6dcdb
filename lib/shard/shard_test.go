package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

const testdataDir = "../../testdata/shard"

// runShard runs the command in process, as the binary would.
func runShard(t testing.TB, ctx context.Context, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	r := testbin.InProcess(ctx, "shard", Description, &Command{}, stdin, args...)
	return r.Code, string(r.Stdout), r.Stderr
}

// readLines returns the records of a shard file, decompressing by name.
func readLines(t testing.TB, path string) []string {
	t.Helper()
	return splitLines(readFile(t, path))
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasSuffix(path, ".zst"):
		d, err := zstd.NewReader(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if raw, err = d.DecodeAll(raw, nil); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	case strings.HasSuffix(path, ".gz"):
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return raw
}

func splitLines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// expectedShard computes a record's shard from the documented rule with the
// standard library's decoder, independently of the code under test.
func expectedShard(t testing.TB, line string, n int) int {
	t.Helper()
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	var key string
	if len(v.ID) > 0 && v.ID[0] == '"' {
		json.Unmarshal(v.ID, &key)
	} else if len(v.ID) > 0 && string(v.ID) != "null" {
		key = string(v.ID)
	}
	if key == "" {
		var p record.Prompt
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		key = record.ContentID(p.AppendCanonical(nil))
	}
	return int(xxh3.HashString(key) % uint64(n))
}

// syntheticInput is n prompt records with string and integer ids.
func syntheticInput(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		if i%5 == 0 {
			lines[i] = fmt.Sprintf(`{"id": %d, "messages": [{"role": "user", "content": "question %d"}]}`, 100000+i, i)
		} else {
			lines[i] = fmt.Sprintf(`{"id": "q-%06d", "messages": [{"role": "user", "content": "question %d \u00e9"}], "source": "synthetic"}`, i, i)
		}
	}
	return lines
}

func writeInput(t testing.TB, dir, name string, lines []string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// shardFiles reads shards 0..n-1 of a pattern.
func shardFiles(t testing.TB, pat string, n int) [][]string {
	t.Helper()
	p, err := parsePattern(pat)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]string, n)
	for i := range out {
		out[i] = readLines(t, p.name(i))
	}
	return out
}

// TestGolden pins where each hand-made record goes, and why the bad ones
// are rejected: the assignment must never change between versions, or
// workers running different builds would disagree.
func TestGolden(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(testdataDir, "records.jsonl")
	pat := filepath.Join(dir, "part-{i}.jsonl")
	code, _, stderr := runShard(t, context.Background(), nil, "-n", "4", "-o", pat, "--rejects", filepath.Join(dir, "rejects.jsonl"), in)
	if code != cli.ExitRejects {
		t.Fatalf("exit %d, want %d (rejects); stderr:\n%s", code, cli.ExitRejects, stderr)
	}
	where := map[string]string{}
	for i, lines := range shardFiles(t, pat, 4) {
		for _, l := range lines {
			if _, dup := where[l]; dup {
				t.Errorf("record written twice: %s", l)
			}
			where[l] = fmt.Sprintf("shard %d", i)
			if want := expectedShard(t, l, 4); want != i {
				t.Errorf("record in shard %d, the rule says %d: %s", i, want, l)
			}
		}
	}
	rejected := map[int64]string{}
	for _, l := range readLines(t, filepath.Join(dir, "rejects.jsonl")) {
		var r struct{ Reject record.Reject }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("rejects file line %q: %v", l, err)
		}
		if r.Reject.File != in {
			t.Errorf("reject names file %q, want %q", r.Reject.File, in)
		}
		rejected[r.Reject.Line] = "rejected " + r.Reject.Reason
	}
	var report strings.Builder
	for i, l := range splitLines(readFile(t, in)) {
		line := int64(i + 1)
		got, inShard := where[l]
		why, isRejected := rejected[line]
		switch {
		case strings.TrimSpace(l) == "":
			got = "blank, skipped"
		case inShard && isRejected:
			t.Errorf("line %d both written and rejected", line)
		case isRejected:
			got = why
		case !inShard:
			t.Errorf("line %d neither written nor rejected: %s", line, l)
		}
		fmt.Fprintf(&report, "%d: %s\n", line, got)
	}
	testbin.CheckGolden(t, filepath.Join(testdataDir, "records.golden"), []byte(report.String()))
	if !strings.Contains(stderr, "shard: read 28, wrote 21 into 4 shards") {
		t.Errorf("summary missing or wrong:\n%s", stderr)
	}
}

// TestStableAcrossOrders: the same id lands in the same shard whatever the
// order of the input, compression of the output, or run.
func TestStableAcrossOrders(t *testing.T) {
	lines := syntheticInput(3000)
	shuffled := slices.Clone(lines)
	rand.New(rand.NewSource(7)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	reversed := slices.Clone(lines)
	slices.Reverse(reversed)
	dir := t.TempDir()
	const n = 7
	var runs [][][]string
	for i, in := range [][]string{lines, shuffled, reversed, lines} {
		ext := []string{".jsonl", ".jsonl.zst", ".jsonl.gz", ".jsonl"}[i]
		pat := filepath.Join(dir, fmt.Sprintf("run%d", i), "part-{i:02}"+ext)
		path := writeInput(t, dir, fmt.Sprintf("in%d.jsonl", i), in)
		if code, _, stderr := runShard(t, context.Background(), nil, "-n", fmt.Sprint(n), "-o", pat, path); code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, stderr)
		}
		runs = append(runs, shardFiles(t, pat, n))
	}
	for k := 0; k < n; k++ {
		base := slices.Sorted(slices.Values(runs[0][k]))
		if len(base) == 0 {
			t.Errorf("shard %d is empty: 3000 ids should spread over 7 shards", k)
		}
		for i, run := range runs[1:] {
			if got := slices.Sorted(slices.Values(run[k])); !slices.Equal(got, base) {
				t.Errorf("run %d shard %d holds %d records, run 0 holds %d (or different ones)", i+1, k, len(got), len(base))
			}
		}
		for _, l := range base {
			if want := expectedShard(t, l, n); want != k {
				t.Fatalf("record in shard %d, rule says %d: %s", k, want, l)
			}
		}
	}
	// The first and last runs read the same input: identical files.
	for k := 0; k < n; k++ {
		if !slices.Equal(runs[0][k], runs[3][k]) {
			t.Errorf("shard %d differs between two runs on the same input", k)
		}
	}
}

// TestEachRecordOnce: in every mode, the shards together are exactly the
// input, each line once, and each mode's placement rule holds.
func TestEachRecordOnce(t *testing.T) {
	lines := syntheticInput(1001)
	dir := t.TempDir()
	in := writeInput(t, dir, "in.jsonl", lines)
	tests := []struct {
		name   string
		args   []string
		shards int
		place  func(i int, line string) int // shard of input line i
	}{
		{"hash", []string{"-n", "5"}, 5, func(_ int, l string) int { return expectedShard(t, l, 5) }},
		{"round-robin", []string{"--by", "round-robin", "-n", "4"}, 4, func(i int, _ string) int { return i % 4 }},
		{"lines", []string{"--by", "lines", "--lines-per-shard", "300"}, 4, func(i int, _ string) int { return i / 300 }},
		{"one shard", []string{"-n", "1"}, 1, func(int, string) int { return 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pat := filepath.Join(dir, tt.name, "s-{i:03}.jsonl.zst")
			code, _, stderr := runShard(t, context.Background(), nil, append(tt.args, "-o", pat, in)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			got := shardFiles(t, pat, tt.shards)
			want := make([][]string, tt.shards)
			for i, l := range lines {
				k := tt.place(i, l)
				want[k] = append(want[k], l)
			}
			for k := range want {
				if !slices.Equal(got[k], want[k]) {
					t.Errorf("shard %d: %d records, want %d (in input order)", k, len(got[k]), len(want[k]))
				}
			}
			if _, err := os.Stat(strings.Replace(pat, "{i:03}", fmt.Sprintf("%03d", tt.shards), 1)); err == nil {
				t.Errorf("a shard beyond the %d expected was written", tt.shards)
			}
			if !strings.Contains(stderr, fmt.Sprintf("read 1001, wrote 1001 into %d shards", tt.shards)) {
				t.Errorf("summary:\n%s", stderr)
			}
		})
	}
}

// TestSelectEqualsFile: --select K/N streams exactly the bytes of file K,
// read from the same (here gzip-compressed) input.
func TestSelectEqualsFile(t *testing.T) {
	dir := t.TempDir()
	lines := syntheticInput(800)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Join(lines, "\n") + "\n"))
	zw.Close()
	in := filepath.Join(dir, "in.jsonl.gz")
	os.WriteFile(in, gz.Bytes(), 0o644)
	for _, by := range []string{"hash", "round-robin"} {
		pat := filepath.Join(dir, by, "part-{i}.jsonl.zst")
		if code, _, stderr := runShard(t, context.Background(), nil, "--by", by, "-n", "6", "-o", pat, in); code != 0 {
			t.Fatalf("%s: exit %d\n%s", by, code, stderr)
		}
		p, _ := parsePattern(pat)
		total := 0
		for k := 0; k < 6; k++ {
			code, stdout, stderr := runShard(t, context.Background(), nil, "--by", by, "--select", fmt.Sprintf("%d/6", k), in)
			if code != 0 {
				t.Fatalf("%s select %d: exit %d\n%s", by, k, code, stderr)
			}
			if file := readFile(t, p.name(k)); !bytes.Equal([]byte(stdout), file) {
				t.Errorf("%s: --select %d/6 gave %d bytes, file %d holds %d", by, k, len(stdout), k, len(file))
			}
			total += len(splitLines([]byte(stdout)))
			if !strings.Contains(stderr, fmt.Sprintf("selected %d (shard %d/6", len(splitLines([]byte(stdout))), k)) {
				t.Errorf("select summary:\n%s", stderr)
			}
		}
		if total != len(lines) {
			t.Errorf("%s: selects together gave %d records, input has %d", by, total, len(lines))
		}
	}
}

// TestRealParquet shards the Infinity-Instruct-style Parquet files (string
// and int64 ids) and checks every row lands once, where the rule says.
func TestRealParquet(t *testing.T) {
	real := "../../../shared/data/real"
	if _, err := os.Stat(real); err != nil {
		t.Skipf("real data not available at %s: %v", real, err)
	}
	for _, name := range []string{"ii_0625_style.parquet", "ii_3m_style.parquet"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pat := filepath.Join(dir, "p-{i}.jsonl")
			in := filepath.Join(real, name)
			code, _, stderr := runShard(t, context.Background(), nil, "-n", "3", "-o", pat, in)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			ids := map[string]int{}
			for k, lines := range shardFiles(t, pat, 3) {
				for _, l := range lines {
					var v struct{ ID record.ID }
					if err := json.Unmarshal([]byte(l), &v); err != nil || v.ID.IsZero() {
						t.Fatalf("row without a usable id (%v): %.100s", err, l)
					}
					ids[v.ID.Text]++
					if want := expectedShard(t, l, 3); want != k {
						t.Errorf("id %s in shard %d, rule says %d", v.ID.Text, k, want)
					}
				}
			}
			if len(ids) != 500 {
				t.Errorf("%d distinct ids, the file has 500 rows", len(ids))
			}
			for id, n := range ids {
				if n != 1 {
					t.Errorf("id %s written %d times", id, n)
				}
			}
			_, sel, _ := runShard(t, context.Background(), nil, "--select", "1/3", in)
			p, _ := parsePattern(pat)
			if sel != string(readFile(t, p.name(1))) {
				t.Error("--select 1/3 differs from shard file 1")
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-o", "p-{i}.jsonl"}, "-n N"},
		{[]string{"-n", "4"}, "give -o PATTERN"},
		{[]string{"-n", "4", "-o", "shards.jsonl"}, "needs a {i} placeholder"},
		{[]string{"-n", "4", "-o", "p-{i}-{i}.jsonl"}, "only one {i}"},
		{[]string{"-n", "4", "-o", "p-{i:3}.jsonl"}, "unknown placeholder"},
		{[]string{"-n", "4", "-o", "{i}/part.jsonl"}, "must be in the file name"},
		{[]string{"-n", "4", "-o", "p-{i.jsonl"}, "unterminated"},
		{[]string{"--select", "8/8"}, "0 <= K < N"},
		{[]string{"--select", "3"}, "want K/N"},
		{[]string{"--select", "1/4", "-n", "8"}, "disagree"},
		{[]string{"--select", "1/4", "-o", "p-{i}.jsonl"}, "drop -o"},
		{[]string{"--select", "1/4", "--by", "lines"}, "--select needs --by hash or round-robin"},
		{[]string{"--by", "lines", "-n", "3", "-o", "p-{i}.jsonl"}, "-n does not apply"},
		{[]string{"--by", "lines", "--lines-per-shard", "0", "-o", "p-{i}.jsonl"}, "must be positive"},
		{[]string{"--by", "modulo", "-n", "2", "-o", "p-{i}.jsonl"}, "--by must be one of"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			code, stdout, stderr := runShard(t, context.Background(), strings.NewReader(`{"id":"a","prompt":"x"}`+"\n"), tt.args...)
			if code != cli.ExitUsage {
				t.Errorf("exit %d, want %d", code, cli.ExitUsage)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q lacks %q", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout not empty: %q", stdout)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a usage error left files: %v", entries)
			}
		})
	}
}

// TestOverwrite: shard refuses to mix with an earlier run's files unless
// --force, and says when files of a larger earlier run remain.
func TestOverwrite(t *testing.T) {
	dir := t.TempDir()
	in := writeInput(t, dir, "in.jsonl", syntheticInput(50))
	pat := filepath.Join(dir, "out", "part-{i}.jsonl")
	if code, _, stderr := runShard(t, context.Background(), nil, "-n", "4", "-o", pat, in); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	p, _ := parsePattern(pat)
	before := readFile(t, p.name(2))
	code, _, stderr := runShard(t, context.Background(), nil, "-n", "4", "-o", pat, in)
	if code != cli.ExitUsage || !strings.Contains(stderr, "already exist") {
		t.Fatalf("second run without --force: exit %d, stderr %q", code, stderr)
	}
	if !bytes.Equal(before, readFile(t, p.name(2))) {
		t.Error("a refused run changed an existing shard")
	}
	code, _, stderr = runShard(t, context.Background(), nil, "-n", "2", "--force", "-o", pat, in)
	if code != 0 {
		t.Fatalf("--force: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "2 shard files from an earlier run") {
		t.Errorf("no warning about part-2 and part-3 left from the 4-shard run:\n%s", stderr)
	}
	if got := len(readLines(t, p.name(0))) + len(readLines(t, p.name(1))); got != 50 {
		t.Errorf("the two new shards hold %d records, want 50", got)
	}
}

// TestInterrupt: an interrupted split exits 130 and leaves no shard file
// that could pass for complete (with --by lines, only full parts).
func TestInterrupt(t *testing.T) {
	lines := syntheticInput(20000)
	data := []byte(strings.Join(lines, "\n") + "\n")
	for _, args := range [][]string{{"-n", "3"}, {"--by", "lines", "--lines-per-shard", "500"}} {
		t.Run(args[0]+args[1], func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			in := &testbin.InterruptingReader{Data: data, After: len(data) / 4, Cancel: cancel}
			code, _, stderr := runShard(t, ctx, in, append(args, "-o", filepath.Join(dir, "p-{i}.jsonl"))...)
			if code != cli.ExitInterrupted {
				t.Fatalf("exit %d, want %d\n%s", code, cli.ExitInterrupted, stderr)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if args[0] == "-n" {
					t.Errorf("interrupted hash split left %s", e.Name())
					continue
				}
				if n := len(readLines(t, filepath.Join(dir, e.Name()))); n != 500 {
					t.Errorf("interrupted lines split left %s with %d records (only full parts may appear)", e.Name(), n)
				}
			}
		})
	}
}

func TestPattern(t *testing.T) {
	tests := []struct {
		pat   string
		names []string // shards 0, 7, 123
		err   string
	}{
		{"part-{i}.jsonl", []string{"part-0.jsonl", "part-7.jsonl", "part-123.jsonl"}, ""},
		{"s/part-{i:03}.jsonl.zst", []string{"s/part-000.jsonl.zst", "s/part-007.jsonl.zst", "s/part-123.jsonl.zst"}, ""},
		{"{i:01}", []string{"0", "7", "123"}, ""},
		{"a/b/{i}-of-8.gz", []string{"a/b/0-of-8.gz", "a/b/7-of-8.gz", "a/b/123-of-8.gz"}, ""},
		{"part.jsonl", nil, "needs a {i}"},
		{"part-{i:0}.jsonl", nil, "unknown placeholder"},
		{"part-{i:010}.jsonl", nil, "padding"},
		{"part-{j}.jsonl", nil, "needs a {i}"},
		{"part-{index}.jsonl", nil, "unknown placeholder"},
	}
	for _, tt := range tests {
		p, err := parsePattern(tt.pat)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.pat, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.pat, err)
			continue
		}
		for j, i := range []int{0, 7, 123} {
			if got := p.name(i); got != tt.names[j] {
				t.Errorf("%q shard %d: %q, want %q", tt.pat, i, got, tt.names[j])
			}
		}
	}
}

// FuzzShardKey: any line is either rejected or given the key the standard
// decoder finds in the field named exactly "id", and never crashes the tool.
func FuzzShardKey(f *testing.F) {
	for _, l := range splitLines(mustRead(f, filepath.Join(testdataDir, "records.jsonl"))) {
		f.Add([]byte(l))
	}
	f.Add([]byte(`{"id":"a","id":"b"}`))
	f.Add([]byte(`{"ID":"x","prompt":"p"}`))
	f.Add([]byte(`{"id":9223372036854775808}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		key, rej := shardKey(data)
		if rej != nil {
			return
		}
		if key == "" {
			t.Fatalf("accepted with an empty key: %q", data)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("accepted, but the standard decoder says %v: %q", err, data)
		}
		var s string
		if json.Unmarshal(v["id"], &s) == nil && s != "" && s != key {
			t.Fatalf("key %q, but the id is %q: %q", key, s, data)
		}
	})
}

// FuzzPattern: the file a pattern names for shard i is recognised as
// shard i when an earlier run's files are looked for.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"part-{i}.jsonl", "s/{i:04}.zst", "{i}", "x{i:9}y", "a{i:0}", "7{i}7"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, i int) {
		p, err := parsePattern(s)
		if err != nil || i < 0 {
			return
		}
		dir, base := filepath.Split(p.name(i))
		if dir != p.dir {
			t.Fatalf("%q shard %d: directory %q, want %q", s, i, dir, p.dir)
		}
		if got, ok := p.index(base); !ok || got != i {
			t.Fatalf("%q shard %d: file %q reads back as %d, %v", s, i, base, got, ok)
		}
	})
}

func mustRead(t testing.TB, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
