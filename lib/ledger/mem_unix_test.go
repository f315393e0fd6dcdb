//go:build unix

package ledger

import (
	"math/rand/v2"
	"testing"
)

// One table grown from 8 slots to 16,384 (11 doublings, past a page from
// 512 slots on): every fingerprint is still found with its second word,
// each doubling unmaps the arrays it left, and release unmaps the rest.
func TestTableGrowsOffHeap(t *testing.T) {
	const n = 10_000
	m := &offHeap{}
	var tb ledgerTable
	rng := rand.New(rand.NewPCG(3, 4))
	fps := make([]uint64, n)
	for i := range fps {
		fps[i] = rng.Uint64()&^slotFlags | 1<<2 // flags clear, never 0
		tb.keys[tb.slot(fps[i], m)] |= slotSeen
		if i == n/4 { // the second word arrives midway, as with sample 1
			tb.more = m.alloc(len(tb.keys))
		}
		if tb.more != nil {
			tb.more[tb.find(fps[i])] = uint64(i)
		}
	}
	if len(tb.keys) != 16384 || tb.used != n {
		t.Fatalf("%d slots, %d used; want 16384, %d", len(tb.keys), tb.used, n)
	}
	for i, fp := range fps {
		j := tb.find(fp)
		if j < 0 || tb.keys[j]&slotSeen == 0 {
			t.Fatalf("fingerprint %d lost after growing", i)
		}
		if i >= n/4 && tb.more[j] != uint64(i) {
			t.Fatalf("fingerprint %d: second word %d, want %d", i, tb.more[j], i)
		}
	}
	if want := 2 * 16384 * 8; m.bytes != want || len(m.mapped) != 2 {
		t.Fatalf("%d bytes in %d mappings; want %d in 2 (the arrays in use)", m.bytes, len(m.mapped), want)
	}
	m.release()
	if m.bytes != 0 || len(m.mapped) != 0 {
		t.Fatalf("after release: %d bytes in %d mappings", m.bytes, len(m.mapped))
	}
}
