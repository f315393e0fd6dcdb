package compose

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchInput is about 32 MB of prompt records of ~1 KB, the size of a
// typical Infinity-Instruct prompt, from four sources.
func benchInput(b *testing.B) (string, int64) {
	b.Helper()
	var buf bytes.Buffer
	body := strings.Repeat("Explain the difference between a process and a thread, with an example. ", 12)
	sources := []string{"ii-0625", "code", "math", "chat"}
	for i := 0; buf.Len() < 32<<20; i++ {
		fmt.Fprintf(&buf, `{"id": "ii-%08d", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "%d: %s"}], "source": %q, "meta": {"langdetect": "en"}}`+"\n",
			i, i, body, sources[i%len(sources)])
	}
	path := filepath.Join(b.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return path, int64(buf.Len())
}

// BenchmarkCompose is both passes over a 32 MB file: count (read, check
// and group every record, draw its rank) and select (read again, write
// the chosen records byte for byte).
func BenchmarkCompose(b *testing.B) {
	path, size := benchInput(b)
	out := filepath.Join(b.TempDir(), "mix.jsonl")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"by-source", []string{"--by", "source", "--share", "ii-0625=0.5,code=0.3,math=0.2", "--total", "10000"}},
		{"by-source-1-worker", []string{"--workers", "1", "--by", "source", "--share", "ii-0625=0.5,code=0.3,math=0.2", "--total", "10000"}},
		{"by-meta-field", []string{"--by", "meta.langdetect", "--total", "10000"}},
		{"by-length", []string{"--by", "length", "--equal", "--total", "10000"}},
		{"by-lang", []string{"--by", "lang", "--total", "10000"}},
		{"sample", []string{"--total", "10000"}},
		{"count-only", []string{"--by", "source", "--dry-run"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(size)
			args := append(append([]string{"--force", "--progress", "0", "-o", out}, c.args...), path)
			for b.Loop() {
				if r := runCompose(b, nil, args...); r.Code != 0 {
					b.Fatalf("exit %d\n%s", r.Code, r.Stderr)
				}
			}
		})
	}
}

// BenchmarkPlace is the first pass's work on one record: check it, find
// its group and draw its rank.
func BenchmarkPlace(b *testing.B) {
	line := []byte(`{"id": "ii-00000001", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "` +
		strings.Repeat("Explain the difference between a process and a thread, with an example. ", 12) + `"}], "source": "code", "meta": {"langdetect": "en"}}`)
	spec, err := flagSpec("source", "ii-0625=0.5,code=0.3,math=0.2", "", false, nil)
	if err != nil {
		b.Fatal(err)
	}
	r := &run{spec: spec, want: map[string]bool{}}
	var buf []byte
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if p := r.place(line, &buf); p.rej != nil {
			b.Fatal(p.rej.detail)
		}
	}
}
