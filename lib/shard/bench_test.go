package shard

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// benchInput is about 32 MB of prompt records of ~1 KB, the size of a
// typical Infinity-Instruct prompt.
func benchInput() []byte {
	var b bytes.Buffer
	body := strings.Repeat("Explain the difference between a process and a thread, with an example. ", 12)
	for i := 0; b.Len() < 32<<20; i++ {
		fmt.Fprintf(&b, `{"id": "ii-%08d", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "%d: %s"}], "source": "infinity-instruct/0625", "meta": {"langdetect": "en"}}`+"\n", i, i, body)
	}
	return b.Bytes()
}

func BenchmarkShard(b *testing.B) {
	input := benchInput()
	dir := b.TempDir()
	cases := []struct {
		name string
		args []string
	}{
		{"hash-8", []string{"-n", "8", "-o", filepath.Join(dir, "h-{i}.jsonl")}},
		{"round-robin-8", []string{"--by", "round-robin", "-n", "8", "-o", filepath.Join(dir, "r-{i}.jsonl")}},
		{"lines", []string{"--by", "lines", "--lines-per-shard", "5000", "-o", filepath.Join(dir, "l-{i}.jsonl")}},
		{"select-3of8", []string{"--select", "3/8"}},
		{"hash-8-zstd", []string{"-n", "8", "-o", filepath.Join(dir, "z-{i}.jsonl.zst")}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for i := 0; i < b.N; i++ {
				code, _, stderr := runShard(b, context.Background(), bytes.NewReader(input), append(c.args, "--force")...)
				if code != 0 {
					b.Fatalf("exit %d\n%s", code, stderr)
				}
			}
		})
	}
}

func BenchmarkShardKey(b *testing.B) {
	line := bytes.SplitN(benchInput(), []byte("\n"), 2)[0]
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, rej := shardKey(line); rej != nil {
			b.Fatal(rej.detail)
		}
	}
}
