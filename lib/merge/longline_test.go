package merge

import (
	"bytes"
	"testing"
)

// A long line the reader hands over (owned) is kept as it is, not copied.
func TestTableKeepsOwnedData(t *testing.T) {
	m := &merger{budget: 1 << 40}
	tb := m.newTable(0)
	big := bytes.Repeat([]byte("x"), 1<<20)
	if err := tb.add(&entry{id: "a", rank: rankStop, data: big, owned: true}); err != nil {
		t.Fatal(err)
	}
	better := bytes.Repeat([]byte("y"), 1<<20)
	if err := tb.add(&entry{id: "b", rank: rankStop, data: []byte("short")}); err != nil {
		t.Fatal(err)
	}
	if err := tb.add(&entry{id: "b", rank: rankStop, seq: 1, data: better, owned: true}); err != nil {
		t.Fatal(err)
	}
	if &tb.entries.at(0).data[0] != &big[0] || &tb.entries.at(1).data[0] != &better[0] {
		t.Fatal("owned data was copied")
	}
}
