package stats

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"tokenmill/lib/cli"
)

// benchInput writes about size bytes of random records, text lengths
// multiplied by scale (40: answers of a few KB, as infer writes them; 2:
// records of a few hundred bytes, where the per-record work shows), and
// returns the file, its size and its record count.
func benchInput(b *testing.B, size, scale int) (string, int64, int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(42, 42))
	var buf bytes.Buffer
	n := 0
	for ; buf.Len() < size; n++ {
		buf.Write(randomRecord(rng, 1<<30, scale))
		buf.WriteByte('\n')
	}
	path := filepath.Join(b.TempDir(), "gen.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return path, int64(buf.Len()), n
}

// BenchmarkStats is the whole command on a file: read, parse, aggregate,
// report, with one parsing goroutine and with two.
func BenchmarkStats(b *testing.B) {
	for _, bc := range []struct {
		name        string
		size, scale int
	}{{"answers=KB", 32 << 20, 40}, {"records=small", 16 << 20, 2}} {
		b.Run(bc.name, func(b *testing.B) {
			path, size, records := benchInput(b, bc.size, bc.scale)
			for _, workers := range []int{1, 2} {
				b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
					benchRun(b, path, size, records, workers)
				})
			}
		})
	}
}

func benchRun(b *testing.B, path string, size int64, records, workers int) {
	env := &cli.Env{Name: "stats", Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: io.Discard}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		cmd := &Command{Files: []string{path}, WorkersFlag: cli.WorkersFlag{Workers: workers}, Top: 10}
		if err := cmd.Run(context.Background(), env); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkParse is parse alone on one goroutine.
func BenchmarkParse(b *testing.B) {
	rng := rand.New(rand.NewPCG(42, 42))
	lines := make([][]byte, 2000)
	var size int64
	for i := range lines {
		lines[i] = randomRecord(rng, 1<<30, 40)
		size += int64(len(lines[i]) + 1)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	var f fact
	for b.Loop() {
		for _, line := range lines {
			if err := parse(line, &f); err != nil {
				b.Fatal(err)
			}
		}
	}
}
