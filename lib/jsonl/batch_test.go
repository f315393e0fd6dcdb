package jsonl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// batchInput is n records, each naming its line, with an over-long line
// and a long line (assembled in a buffer of its own) among them.
func batchInput(n int) (string, []string) {
	var b strings.Builder
	var want []string
	for i := 1; i <= n; i++ {
		line := fmt.Sprintf(`{"line":%d}`, i)
		switch i {
		case 7:
			line = `{"long":"` + strings.Repeat("x", 3*readBufferSize) + `"}`
		case 11:
			line = `{"toolong":"` + strings.Repeat("y", 5*readBufferSize) + `"}`
		}
		b.WriteString(line + "\n")
		if i == 11 {
			line = ReasonLineTooLong
		}
		want = append(want, fmt.Sprintf("%d %s", i, line))
	}
	return b.String(), want
}

// TestParallelKeepsInputOrder: whatever the workers' timing, sequence
// sees every input once, in input order, each with its worker's result,
// input errors in their place.
func TestParallelKeepsInputOrder(t *testing.T) {
	input, want := batchInput(3*BatchRecords + 500)
	for _, workers := range []int{1, 3} {
		in := NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{MaxLine: 4 * readBufferSize})
		var got []string
		err := Parallel(context.Background(), in, workers, func(w int, b *Batch[int]) {
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			for i := range b.Items {
				b.Items[i].V = len(b.Items[i].Data)
			}
		}, func(b *Batch[int]) error {
			for _, it := range b.Items {
				var ie *InputError
				switch {
				case errors.As(it.Err, &ie):
					got = append(got, fmt.Sprintf("%d %s", it.Line, ie.Reason))
				case it.V != len(it.Data):
					return fmt.Errorf("line %d: the worker's result %d, not its %d bytes", it.Line, it.V, len(it.Data))
				default:
					got = append(got, fmt.Sprintf("%d %s", it.Line, it.Data))
				}
			}
			if b.Read.Records == 0 {
				return errors.New("a batch without the reader's counts")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%d workers: %v", workers, err)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%d workers: %d inputs sequenced, want %d in input order", workers, len(got), len(want))
		}
	}
}

// TestParallelOneWorkerInline: with one worker, each batch is worked on
// by the sequencing goroutine just before it is sequenced (one core's
// work, no hand-off), and never concurrently with a sequence call.
func TestParallelOneWorkerInline(t *testing.T) {
	input, want := batchInput(3*BatchRecords + 500)
	in := NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{MaxLine: 4 * readBufferSize})
	worked, sequenced, items := 0, 0, 0 // plain ints: -race reports any concurrent use
	err := Parallel(context.Background(), in, 1, func(w int, b *Batch[int]) {
		if w != 0 || worked != sequenced {
			t.Errorf("worker %d works on batch %d after %d were sequenced", w, worked, sequenced)
		}
		worked++
	}, func(b *Batch[int]) error {
		if sequenced++; sequenced != worked {
			return fmt.Errorf("batch %d sequenced, %d worked on", sequenced, worked)
		}
		items += len(b.Items)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if items != len(want) || sequenced < 4 {
		t.Fatalf("%d inputs in %d batches, want %d in at least 4", items, sequenced, len(want))
	}
}

// endless yields "{}" records without end, counting the bytes read.
type endless struct{ n atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "{}\n"[i%3]
	}
	n := len(p) / 3 * 3
	e.n.Add(int64(n))
	return n, nil
}

// TestParallelStopsOnSequenceError: a failing sequence stops the reading
// of an endless input, and its error is returned.
func TestParallelStopsOnSequenceError(t *testing.T) {
	src := &endless{}
	boom := errors.New("disk full")
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- Parallel(context.Background(), NewReader(context.Background(), nil, nil, src, Options{}), 2, func(int, *Batch[struct{}]) {}, func(*Batch[struct{}]) error {
			calls++
			return boom
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) || calls != 1 {
			t.Fatalf("Parallel = %v after %d calls, want the sequence's error after 1", err, calls)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Parallel did not return within 20 s of the sequence's error")
	}
	// The reader stops within a few batches: its count goes still.
	last := int64(-1)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n := src.n.Load()
		if n == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader is still reading 20 s after the failure: %d bytes", n)
		}
		last = n
	}
	if last > 64<<20 {
		t.Errorf("the reader read %d bytes after the failure", last)
	}
}

// TestParallelCancelWithQuietInput: once ctx ends, the batches read are
// sequenced and Parallel returns, though the reader waits on an input
// that says nothing more.
func TestParallelCancelWithQuietInput(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte(strings.Repeat("{}\n", BatchRecords+5)))
	ctx, cancel := context.WithCancel(context.Background())
	in := NewReader(context.Background(), nil, nil, pr, Options{})
	seen := 0
	done := make(chan error, 1)
	go func() {
		done <- Parallel(ctx, in, 2, func(int, *Batch[struct{}]) {}, func(b *Batch[struct{}]) error {
			seen += len(b.Items)
			cancel()
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil || seen != BatchRecords {
			t.Fatalf("Parallel = %v after %d records, want nil after the first batch of %d", err, seen, BatchRecords)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Parallel did not return within 20 s of the cancel")
	}
}

// TestParallelHandsOverLongLines: a long line reaches the sequence as the
// buffer the reader assembled it in: the batch holds no second copy of it.
func TestParallelHandsOverLongLines(t *testing.T) {
	long := append(append([]byte(`{"id":"huge","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("x"), 8<<20)...), `"}]}`...)
	input := append(append([]byte(`{"id":"a","messages":[{"role":"user","content":"a"}]}`+"\n"), long...), '\n')
	in := NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{})
	batches := 0
	err := Parallel(context.Background(), in, 2, func(int, *Batch[struct{}]) {}, func(b *Batch[struct{}]) error {
		batches++
		if len(b.Items) != 2 {
			return fmt.Errorf("%d items, want 2", len(b.Items))
		}
		it := &b.Items[1]
		if it.end >= 0 || !bytes.Equal(it.Data, long) {
			return errors.New("the long line was not handed over whole")
		}
		if len(b.data) > 1<<10 {
			return fmt.Errorf("the batch copied %d bytes: the long line is in it twice", len(b.data))
		}
		return nil
	})
	if err != nil || batches != 1 {
		t.Fatalf("Parallel = %v after %d batches, want nil after 1", err, batches)
	}
}

// TestParallelLastBatchCarriesFinalCount: the batch that ends the input
// is sequenced even when a full batch took its last record, so that its
// Read counts what follows (blank lines); an empty input is one empty
// batch.
func TestParallelLastBatchCarriesFinalCount(t *testing.T) {
	for _, records := range []int{0, 5, BatchRecords} {
		input := strings.Repeat("{}\n", records) + "\n\n\n"
		var items int
		var last Stats
		err := Parallel(context.Background(), NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{}), 2,
			func(int, *Batch[struct{}]) {}, func(b *Batch[struct{}]) error {
				items += len(b.Items)
				last = b.Read
				return nil
			})
		if err != nil || items != records || last.Bytes != int64(len(input)) {
			t.Errorf("%d records: Parallel = %v with %d items, the last batch read %d bytes; want %d items, all %d bytes",
				records, err, items, last.Bytes, records, len(input))
		}
	}
}

// BenchmarkParallel is the machinery alone: read, batch, hand each batch
// to the workers (each reads every byte of its records, as a parser
// would) and take them back in order, with one worker (on the
// sequencing goroutine) and with two.
func BenchmarkParallel(b *testing.B) {
	line := `{"id":"x","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 45) + `"}]}` + "\n"
	input := []byte(strings.Repeat(line, 40000))
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				in := NewReader(context.Background(), nil, nil, bytes.NewReader(input), Options{})
				n := 0
				err := Parallel(context.Background(), in, workers, func(_ int, bt *Batch[int]) {
					for i := range bt.Items {
						bt.Items[i].V = bytes.Count(bt.Items[i].Data, []byte{'"'})
					}
				}, func(bt *Batch[int]) error {
					for _, it := range bt.Items {
						n += it.V
					}
					return nil
				})
				if err != nil || n != 40000*14 {
					b.Fatalf("%d quotes counted, %v", n, err)
				}
			}
		})
	}
}
