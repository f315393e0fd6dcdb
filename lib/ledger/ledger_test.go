package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"tokenmill/internal/chaos"
	"tokenmill/lib/jsonl"
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
	l := New()
	seen := map[string]bool{}
	done := map[key]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	samples := []int{0, 1, 2, 63, 64, 65, 200}
	for i := range n {
		id := "p" + strconv.Itoa(rng.IntN(n))
		if dup := l.See(id); dup != seen[id] {
			t.Fatalf("see(%q) = %v after %d calls, want %v", id, dup, i, seen[id])
		}
		seen[id] = true
		if rng.IntN(3) == 0 {
			s := samples[rng.IntN(len(samples))]
			l.MarkDone(id, s)
			done[key{id, s}] = true
		}
	}
	for i := range n + 1000 { // a thousand ids never shown
		id := "p" + strconv.Itoa(i)
		for _, s := range samples {
			if got := l.Done(id, s); got != done[key{id, s}] {
				t.Fatalf("done(%q, %d) = %v, want %v", id, s, got, done[key{id, s}])
			}
		}
		if !seen[id] && l.See(id) {
			t.Fatalf("see(%q) says seen before, never shown", id)
		}
	}
}

// BenchmarkLedger marks a million ids seen and done, as a run does, and
// reports the memory they take an id (the live heap, and the ledger's
// arrays mapped outside it): the ledger's tables beside a Go map of the
// ids' 128-bit hashes (what the ledger was), in one run.
func BenchmarkLedger(b *testing.B) {
	const n = 1_000_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "0000-" + strconv.Itoa(i)
	}
	measure := func(b *testing.B, fill func() any) {
		var perID, heapPerID float64
		for b.Loop() {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			kept := fill()
			runtime.GC()
			runtime.ReadMemStats(&after)
			heapPerID = float64(after.HeapAlloc-before.HeapAlloc) / n
			perID = heapPerID
			if l, ok := kept.(*Ledger); ok {
				perID += float64(l.mem.bytes) / n
			}
			runtime.KeepAlive(kept)
		}
		b.ReportMetric(perID, "B/id")
		b.ReportMetric(heapPerID, "heap-B/id")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/id")
	}
	b.Run("tables", func(b *testing.B) {
		measure(b, func() any {
			l := New()
			for _, id := range ids {
				l.See(id)
				l.MarkDone(id, 0)
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

func TestLedger(t *testing.T) {
	l := New()
	if l.See("a") || !l.See("a") {
		t.Error("see: first false, then true")
	}
	for _, s := range []int{0, 1, 62, 63, 64, 1000} {
		if l.Done("a", s) {
			t.Errorf("sample %d done before marking", s)
		}
		l.MarkDone("a", s)
		if !l.Done("a", s) || l.Done("b", s) {
			t.Errorf("sample %d: done not tracked per id and sample", s)
		}
	}
	if l.See("b") {
		t.Error("b seen before")
	}
	l.MarkDone("c", 0)
	if l.See("c") {
		t.Error("a done answer marked its id as read from the input")
	}
}

func TestScanDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gen.jsonl")
	content := strings.Join([]string{
		`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":0}}`,
		`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":1}}`,
		`{"id":7,"output":{"text":"x","finish_reason":"length","sample":0}}`,
		`{"id":"b","output":{"text":"x","finish_reason":"length","sample":0}}`,
		`{"id":"b","output":{"text":"y","finish_reason":"stop","sample":0}}`,
		`{"id":"c","error":{"status":400}}`,
		`not json`,
	}, "\n") + "\n"
	os.WriteFile(path, []byte(content), 0o644)
	for _, redo := range []bool{false, true} {
		l := New()
		var warned []string
		info, err := l.Scan(path, Options{Skip: true, RedoLength: redo, Warn: func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }})
		if err != nil {
			t.Fatal(err)
		}
		wantAnswers, wantLength := int64(4), int64(0)
		if redo {
			wantAnswers, wantLength = 3, 1
		}
		if info.Answers != wantAnswers || info.Length != wantLength || info.Unreadable != 2 || len(warned) != 2 {
			t.Errorf("redo=%v: %+v, warnings %q", redo, info, warned)
		}
		if !l.Done("a", 1) || !l.Done("b", 0) || l.Done("c", 0) || l.Done("7", 0) == redo {
			t.Errorf("redo=%v: wrong done set", redo)
		}
	}
}

// TestFreeSeedOffset: the offset --append picks is one past the highest
// seed offset plus sample the file's answers took; an offset that would
// pass the largest integer, or a negative one, is not taken.
func TestFreeSeedOffset(t *testing.T) {
	for _, tt := range []struct {
		name  string
		lines []string
		want  int64
	}{
		{"empty", nil, 0},
		{"one round of 2 samples", []string{`{"id":"a","output":{"sample":0}}`, `{"id":"a","output":{"sample":1}}`}, 2},
		{"a rerun's offset", []string{`{"id":"a","output":{"sample":0}}`, `{"id":"a","output":{"sample":0,"seed_offset":5}}`}, 6},
		{"a record's own sample", []string{`{"id":"a","output":{"sample":9,"seed_offset":2}}`, `{"id":"b","output":{"sample":0,"seed_offset":7}}`}, 12},
		{"errors and junk", []string{`{"id":"a","error":{"sample":40}}`, `not json`, `{"id":"b","output":{"sample":0}}`}, 1},
		{"wraps", []string{`{"id":"a","output":{"sample":1,"seed_offset":9223372036854775807}}`, `{"id":"b","output":{"sample":3}}`}, 4},
		{"negative", []string{`{"id":"a","output":{"sample":1,"seed_offset":-50}}`}, 0},
	} {
		path := filepath.Join(t.TempDir(), "gen.jsonl")
		os.WriteFile(path, []byte(strings.Join(tt.lines, "\n")+"\n"), 0o644)
		info, err := New().Scan(path, Options{Warn: func(string, ...any) {}})
		if err != nil || info.FreeSeedOffset != tt.want {
			t.Errorf("%s: free seed offset %d (%v), want %d", tt.name, info.FreeSeedOffset, err, tt.want)
		}
	}
}

// FuzzScanDone: whatever the output file to resume holds, a bad line is
// counted and skipped, never fatal (only a file that cannot be read at
// all, such as a damaged gzip stream, is refused), and no more answers
// are counted than there are lines.
func FuzzScanDone(f *testing.F) {
	f.Add([]byte(`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":0}}`+"\n"+`{"id":"a","output":{"sample":1,"finish_reason":"length"}}`+"\n"), false)
	f.Add([]byte(`{"id":7,"output":{"sample":0}}`+"\n"+`{"id":"b","error":{"status":500}}`+"\n"+`{"id":"c","out`), true)
	f.Add(chaos.GarbageBytes(300), false)
	f.Add([]byte("\x1f\x8b\x08\x00garbage"), false)
	f.Fuzz(func(t *testing.T, data []byte, redo bool) {
		path := filepath.Join(t.TempDir(), "gen.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		info, err := New().Scan(path, Options{Skip: true, RedoLength: redo, Warn: func(string, ...any) {}})
		var ie *jsonl.InputError
		if err != nil && !(errors.As(err, &ie) && ie.Reason == jsonl.ReasonUnreadable) {
			t.Fatalf("%q: %v, want only a file that cannot be read at all refused", data, err)
		}
		lines := int64(bytes.Count(data, []byte("\n")) + 1)
		if info.Answers < 0 || info.Answers+info.Unreadable > lines {
			t.Fatalf("%q: %+v from %d lines", data, info, lines)
		}
	})
}
