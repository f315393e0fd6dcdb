package infer

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/zeebo/xxh3"
)

// The ledger against a map of what was marked: 300,000 ids (every table
// grown many times), each seen, some twice, with samples on both sides of
// every boundary done at random; every id and sample answers as the map
// does, and ids never shown answer no.
func TestLedgerAgainstMap(t *testing.T) {
	const n = 300_000
	type key struct {
		id     string
		sample int
	}
	l := newLedger()
	seen := map[string]bool{}
	done := map[key]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	samples := []int{0, 1, 2, 63, 64, 65, 200}
	for i := range n {
		id := "p" + strconv.Itoa(rng.IntN(n))
		if dup := l.see(id); dup != seen[id] {
			t.Fatalf("see(%q) = %v after %d calls, want %v", id, dup, i, seen[id])
		}
		seen[id] = true
		if rng.IntN(3) == 0 {
			s := samples[rng.IntN(len(samples))]
			l.markDone(id, s)
			done[key{id, s}] = true
		}
	}
	for i := range n + 1000 { // a thousand ids never shown
		id := "p" + strconv.Itoa(i)
		for _, s := range samples {
			if got := l.done(id, s); got != done[key{id, s}] {
				t.Fatalf("done(%q, %d) = %v, want %v", id, s, got, done[key{id, s}])
			}
		}
		if !seen[id] && l.see(id) {
			t.Fatalf("see(%q) says seen before, never shown", id)
		}
	}
}

// BenchmarkLedger marks a million ids seen and done, as a run does, and
// reports the live heap they take an id: the ledger's tables beside a Go
// map of the ids' 128-bit hashes (what the ledger was), in one run.
func BenchmarkLedger(b *testing.B) {
	const n = 1_000_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "0000-" + strconv.Itoa(i)
	}
	measure := func(b *testing.B, fill func() any) {
		var perID float64
		for b.Loop() {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			kept := fill()
			runtime.GC()
			runtime.ReadMemStats(&after)
			perID = float64(after.HeapAlloc-before.HeapAlloc) / n
			runtime.KeepAlive(kept)
		}
		b.ReportMetric(perID, "B/id")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/id")
	}
	b.Run("tables", func(b *testing.B) {
		measure(b, func() any {
			l := newLedger()
			for _, id := range ids {
				l.see(id)
				l.markDone(id, 0)
			}
			return l
		})
	})
	b.Run("map", func(b *testing.B) {
		measure(b, func() any {
			m := map[xxh3.Uint128]uint64{}
			for _, id := range ids {
				m[xxh3.HashString128(id)] |= 1 << 63
				m[xxh3.HashString128(id)] |= 1
			}
			return m
		})
	})
}
