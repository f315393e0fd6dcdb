package dedup

import (
	"bytes"
	"context"
	"testing"

	"tokenmill/lib/jsonl"
)

// A long line reaches the sequencer as the buffer the reader assembled it
// in: the batch holds no second copy of it.
func TestLongLineIsNotCopied(t *testing.T) {
	long := append(append([]byte(`{"id":"huge","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("x"), 8<<20)...), `"}]}`...)
	input := append(append([]byte(`{"id":"a","messages":[{"role":"user","content":"a"}]}`+"\n"), long...), '\n')
	in := jsonl.NewReader(nil, bytes.NewReader(input), jsonl.Options{})
	free := make(chan *batch, 4)
	for range 4 {
		free <- &batch{}
	}
	work, order := make(chan *batch, 4), make(chan *batch, 4)
	if err := readBatches(context.Background(), in, free, work, order); err != nil {
		t.Fatal(err)
	}
	b := <-order
	if len(b.items) != 2 {
		t.Fatalf("%d items, want 2", len(b.items))
	}
	it := &b.items[1]
	if it.long == nil || !bytes.Equal(b.line(it), long) {
		t.Fatal("the long line was not handed over whole")
	}
	if len(b.data) > 1<<10 {
		t.Fatalf("the batch copied %d bytes: the long line is in it twice", len(b.data))
	}
}
