package minhash

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSpillGivesTheSameAnswers: an index spilled to many runs under a tiny
// budget answers every query as the one in memory does (same ref, id and
// agreement), holds the same texts in the same order, and leaves no file
// in its directory, during the run or after Close.
func TestSpillGivesTheSameAnswers(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	h := NewHasher(defaults)
	dir := t.TempDir()
	mem := NewIndex(defaults, Options{})
	disk := NewIndex(defaults, Options{Memory: 8 << 10, Dir: dir})
	defer disk.Close()
	var base [][]string
	matches := 0
	for i := range 3000 {
		var text []string
		if len(base) > 0 && r.IntN(3) == 0 {
			text = edit(r, base[r.IntN(len(base))], 0.03) // a near-copy of an earlier text
		} else {
			text = randomText(r, 10+r.IntN(80), 3000)
			base = append(base, text)
		}
		sig := h.Sign(nil, []byte(strings.Join(text, " ")))
		m1, ok1, err1 := mem.Query(sig, 0.7)
		m2, ok2, err2 := disk.Query(sig, 0.7)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if ok1 != ok2 || m1.Ref != m2.Ref || m1.Agree != m2.Agree || string(m1.ID) != string(m2.ID) {
			t.Fatalf("text %d: in memory %+v %v, spilled %+v %v", i, m1, ok1, m2, ok2)
		}
		if ok1 {
			matches++
			continue
		}
		id := []byte(fmt.Sprintf(`"t%d"`, i))
		mem.Insert(sig, id)
		if _, err := disk.Insert(sig, id); err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("the spill directory holds %d entries while the index is open", len(left))
		}
	}
	if disk.Runs() < 10 || disk.Spilled() == 0 || matches < 500 {
		t.Fatalf("%d runs, %d texts spilled, %d matches: the test did not exercise spilling", disk.Runs(), disk.Spilled(), matches)
	}
	if in, _ := disk.MemoryBytes(); in > 8<<10+int64(defaults.BytesPerText())*2+12*2048 {
		t.Errorf("the in-memory part holds %d bytes past a budget of %d", in, 8<<10)
	}
	var a, b []string
	mem.Each(func(ref uint32, sig Signature, id []byte) error {
		a = append(a, fmt.Sprint(ref, sig, string(id)))
		return nil
	})
	disk.Each(func(ref uint32, sig Signature, id []byte) error {
		b = append(b, fmt.Sprint(ref, sig, string(id)))
		return nil
	})
	if !slices.Equal(a, b) || len(a) != mem.Len() {
		t.Fatalf("Each: %d texts in memory, %d spilled, or not the same", len(a), len(b))
	}
	if err := disk.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the spill directory holds %d entries after Close", len(left))
	}
}

// TestSpillDirMissing: a spill directory that cannot be made is an error of
// Insert, not a panic or a silent loss.
func TestSpillDirMissing(t *testing.T) {
	x := NewIndex(Params{Bands: 2, Rows: 2, Shingle: 1}, Options{Memory: 1, Dir: "/nonexistent/dir"})
	if _, err := x.Insert(Signature{1, 2, 3, 4}, nil); err == nil || !strings.Contains(err.Error(), "spill") {
		t.Fatalf("Insert past the budget with no spill directory: %v", err)
	}
}

func TestWrongLength(t *testing.T) {
	x := NewIndex(defaults, Options{})
	if _, err := x.Insert(Signature{1}, nil); err != ErrParams {
		t.Errorf("Insert of a short signature: %v", err)
	}
	if _, _, err := x.Query(Signature{1}, 0.8); err != ErrParams {
		t.Errorf("Query of a short signature: %v", err)
	}
}
