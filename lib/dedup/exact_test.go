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

// TestHashIndex: every hash put is found with its value, across growths,
// the all-zero hash included, in bare and valued indexes alike.
func TestHashIndex(t *testing.T) {
	for _, bare := range []bool{false, true} {
		for _, pre := range []int{0, 5000} {
			x := newHashIndex(pre, bare)
			hashes := []xxh3.Uint128{{}}
			for i := range 20000 {
				hashes = append(hashes, distinct("i", i))
			}
			for i, h := range hashes {
				x.put(h, uint64(i))
				x.put(h, uint64(i)) // again: no second key
			}
			if x.len() != len(hashes) {
				t.Fatalf("bare %v: %d keys held, want %d", bare, x.len(), len(hashes))
			}
			for i, h := range hashes {
				v, ok := x.get(h)
				if !ok || !bare && v != uint64(i) {
					t.Fatalf("bare %v: hash %d: %d, %v", bare, i, v, ok)
				}
			}
			if _, ok := x.get(distinct("j", 1)); ok {
				t.Fatal("a hash never put is held")
			}
			n := 0
			x.each(func(xxh3.Uint128, uint64) error { n++; return nil })
			if n != len(hashes) {
				t.Fatalf("each saw %d", n)
			}
		}
	}
}
