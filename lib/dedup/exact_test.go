package dedup

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestExactSet: ids of every length come back as they were put, across
// chunk boundaries and past the longest a chunk slot holds; a bare set
// keeps the hashes alone.
func TestExactSet(t *testing.T) {
	e := newExactSet(0)
	want := map[int][]byte{}
	for i := range 3000 {
		id := []byte(fmt.Sprintf("%q", strings.Repeat("x", i*7%(maxShortID+200))))
		if i%11 == 0 {
			id = nil // a record without an id
		}
		e.put(distinct("e", i), id)
		want[i] = id
	}
	if e.len() != 3000 || len(e.chunks) < 2 || len(e.long) == 0 {
		t.Fatalf("%d keys in %d chunks and %d long ids: the test should cross chunks and reach long ids", e.len(), len(e.chunks), len(e.long))
	}
	for i, id := range want {
		got, ok := e.get(distinct("e", i))
		if !ok || !bytes.Equal(got, id) {
			t.Fatalf("key %d: got %q, %v; want %q", i, got, ok, id)
		}
	}
	if _, ok := e.get(distinct("e", 3000)); ok {
		t.Fatal("a key never put is held")
	}
	n := 0
	e.each(func(xxh3.Uint128, []byte) error { n++; return nil })
	if n != 3000 {
		t.Fatalf("each saw %d keys", n)
	}

	s := NewSet(100, 1e-6, true)
	s.DropIDs()
	if s.keepsIDs() {
		t.Fatal("DropIDs kept the ids")
	}
	for i := range 500 {
		if seen, first := s.Seen(distinct("b", i%400), []byte(`"id"`)); seen != (i >= 400) || first != "" {
			t.Fatalf("key %d: seen %v, first %q", i, seen, first)
		}
	}
	if s.exactLen() != 400 {
		t.Fatalf("%d keys held, want 400", s.exactLen())
	}
}

// TestExactWithoutIDsSameOutput: --exact keeps the same records whether
// or not it keeps ids (with --dups it does).
func TestExactWithoutIDsSameOutput(t *testing.T) {
	input, _ := corpusPrompts(4000, 3)
	code, bare, stderr := runDedup(t, input, "--exact")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dups := t.TempDir() + "/dups.jsonl"
	code, kept, stderr := runDedup(t, input, "--exact", "--dups", dups)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if bare != kept || len(lines(bare)) == 4000 {
		t.Fatalf("--exact kept %d records without ids, %d with: want the same, fewer than 4000", len(lines(bare)), len(lines(kept)))
	}
}
