package minhash

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"tokenmill/internal/corpus"
)

// benchTexts are the first human turns of Infinity-Instruct-shaped rows.
func benchTexts(b *testing.B, n int) ([][]byte, int64) {
	b.Helper()
	g := corpus.New(1)
	texts := make([][]byte, 0, n)
	var total int64
	for len(texts) < n {
		row := g.Next()
		if len(row.Conversations) == 0 {
			continue
		}
		t := []byte(row.Conversations[0].Value)
		texts = append(texts, t)
		total += int64(len(t))
	}
	return texts, total
}

// BenchmarkSignLSH is the work dedup --near adds per record: the signature
// of the prompt text, a query of the index and, for a new text, its
// insertion. MB/s is of prompt text, on one core.
func BenchmarkSignLSH(b *testing.B) {
	var x *Index
	benchSign(b, func(p Params) { x = NewIndex(p, Options{}) }, func(sig Signature) {
		if _, ok, err := x.Query(sig, 0.8); err != nil {
			b.Fatal(err)
		} else if !ok {
			if _, err := x.Insert(sig, []byte(`"0123456789abcdef"`)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSign is the signature alone.
func BenchmarkSign(b *testing.B) {
	benchSign(b, func(Params) {}, func(Signature) {})
}

// benchSign signs 20,000 Infinity-Instruct-shaped prompts each time round,
// calling start before each round and use with each signature, and
// reports MB per CPU second beside the wall-clock MB/s.
func benchSign(b *testing.B, start func(Params), use func(Signature)) {
	p := Params{Bands: DefaultBands, Rows: DefaultRows, Shingle: DefaultShingle, Seed: DefaultSeed}
	texts, total := benchTexts(b, 20000)
	b.SetBytes(total)
	b.ReportAllocs()
	h := NewHasher(p)
	var sig Signature
	cpu := cpuSeconds()
	for b.Loop() {
		start(p)
		for _, t := range texts {
			sig = h.Sign(sig, t)
			use(sig)
		}
	}
	b.ReportMetric(float64(total)*float64(b.N)/1e6/(cpuSeconds()-cpu), "MB/cpu-s")
}

// BenchmarkMemory measures the heap an index of kept texts takes, in bytes
// a text (with ids of 18 bytes, a quoted 16-digit hash), in memory and
// spilled past a budget.
func BenchmarkMemory(b *testing.B) {
	p := Params{Bands: DefaultBands, Rows: DefaultRows, Shingle: DefaultShingle, Seed: DefaultSeed}
	const n = 200_000
	for _, memory := range []int64{0, 16 << 20} {
		b.Run(fmt.Sprintf("memory=%d", memory), func(b *testing.B) {
			texts, _ := benchTexts(b, 1000)
			h := NewHasher(p)
			sigs := make([]Signature, len(texts))
			for i, t := range texts {
				sigs[i] = h.Sign(nil, t)
			}
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				x := NewIndex(p, Options{Memory: memory, Dir: b.TempDir()})
				for i := range n {
					sig := sigs[i%len(sigs)]
					sig[0] = uint32(i) // distinct band keys in band 0
					if _, err := x.Insert(sig, []byte(`"0123456789abcdef"`)); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/prompt")
				runtime.KeepAlive(x)
				x.Close()
			}
		})
	}
}

// cpuSeconds is the process's user and system CPU time so far: on a
// shared machine, MB per CPU second is the per-core rate, where wall-clock
// MB/s also counts the time other processes had the core.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
