package jsonl

import (
	"context"
	"errors"
	"io"
	"sync"
)

// Parallel work on a stream of records, in input order: one goroutine
// reads records into batches, workers goroutines process whole batches at
// once, and the caller's goroutine takes the batches back in the order
// they were read, so what it writes does not depend on timing.

// BatchRecords is the most inputs a Batch holds; it is sent on sooner
// once its records reach batchBytes.
const BatchRecords = 2048

const (
	batchBytes = 512 << 10
	keepBatch  = 8 << 20 // a batch buffer grown past this (a huge line) is let go
)

// Item is one input of a Batch: a record, with the worker's result V, or
// the reader's *InputError for an input it could not read (RawLine then
// says where, without data). A worker may set Err of its own, for a
// record it refuses.
type Item[T any] struct {
	RawLine
	Err        error
	V          T
	start, end int // the record in the batch's buffer; end < 0: a long line of its own
}

// Batch is a run of consecutive inputs. Its records' Data stay valid
// until the sequence function returns.
type Batch[T any] struct {
	Items []Item[T]
	// Read is what the reader had read once the batch was complete.
	Read Stats
	data []byte
	done chan struct{}
}

// Parallel reads in to its end, calls work on every batch from one of
// workers goroutines (worker is its index, for state of its own; with one
// worker, from the caller's goroutine just before sequence, so that one
// worker is one core's work and no batch waits on a hand-off), and
// calls sequence on the batches in input order from the caller's
// goroutine; it closes in. The batch that ends in is sequenced even when
// it holds no input, so that its Read is the reader's final count. When
// ctx ends, reading stops and the whole batches already read are worked on
// and sequenced (a batch still being filled is let go, so what is
// sequenced does not depend on when the reader sees the end); when
// sequence fails, reading stops and the error is returned. Either way
// Parallel returns without waiting for a reader blocked on its input (a
// quiet stdin), which may still hold in: the process is about to end.
func Parallel[T any](ctx context.Context, in *Reader, workers int, work func(worker int, b *Batch[T]), sequence func(b *Batch[T]) error) error {
	workers = max(workers, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := 2*workers + 2
	free := make(chan *Batch[T], slots)
	for range slots {
		free <- &Batch[T]{}
	}
	var todo chan *Batch[T] // nil with one worker: the caller works
	order := make(chan *Batch[T], slots)
	var wg sync.WaitGroup
	if workers > 1 {
		todo = make(chan *Batch[T], slots)
		for w := range workers {
			wg.Go(func() {
				for b := range todo {
					work(w, b)
					close(b.done)
				}
			})
		}
	}
	readDone := make(chan error, 1)
	go func() {
		err := fill(ctx, in, free, todo, order)
		if todo != nil {
			close(todo)
		}
		close(order)
		readDone <- errors.Join(err, in.Close())
	}()
	var seqErr error
	take := func(b *Batch[T]) {
		if todo == nil {
			work(0, b)
		} else {
			<-b.done
		}
		if seqErr == nil {
			if seqErr = sequence(b); seqErr != nil {
				cancel()
			}
		}
		for i := range b.Items {
			b.Items[i] = Item[T]{} // no long line or result outlives its batch
		}
		if cap(b.data) > keepBatch {
			b.data = nil
		}
		free <- b
	}
	for {
		select {
		case b, ok := <-order:
			if !ok {
				wg.Wait()
				return errors.Join(seqErr, <-readDone)
			}
			take(b)
		case <-ctx.Done():
			for {
				select {
				case b, ok := <-order:
					if !ok {
						return seqErr
					}
					take(b)
				default:
					return seqErr
				}
			}
		}
	}
}

// fill reads batches until EOF, a fatal error or cancellation.
// A nil todo sends batches to order alone.
func fill[T any](ctx context.Context, in *Reader, free <-chan *Batch[T], todo, order chan<- *Batch[T]) error {
	var b *Batch[T]
	take := func() bool {
		select {
		case b = <-free:
			if b.data == nil {
				b.data = make([]byte, 0, batchBytes+64<<10) // room for the record that fills it
			}
			b.data, b.Items, b.done = b.data[:0], b.Items[:0], make(chan struct{})
			return true
		case <-ctx.Done():
			return false
		}
	}
	send := func() {
		if b == nil {
			return
		}
		for i := range b.Items {
			if it := &b.Items[i]; it.end >= 0 && it.Err == nil {
				it.Data = b.data[it.start:it.end]
			}
		}
		b.Read = in.Stats
		if todo != nil {
			todo <- b
		}
		order <- b
		b = nil
	}
	for n := 0; ; n++ {
		if n&255 == 0 && ctx.Err() != nil {
			return nil
		}
		rec, err := in.Next()
		if err == io.EOF {
			if b != nil || take() {
				send()
			}
			return nil
		}
		var ie *InputError
		if err != nil {
			if ie = inputError(err); ie == nil {
				send()
				return err
			}
		}
		if b == nil && !take() {
			return nil
		}
		it := Item[T]{RawLine: RawLine{File: rec.File, Line: rec.Line, Built: rec.Built, Offset: rec.Offset, Seekable: rec.Seekable}, Err: err, start: len(b.data)}
		switch {
		case ie != nil:
			it.File, it.Line = ie.File, ie.Line
		default:
			if long := in.TakeLong(rec); long != nil {
				it.Data, it.end = long, -1
				break
			}
			b.data = append(b.data, rec.Data...)
			it.end = len(b.data)
		}
		b.Items = append(b.Items, it)
		if len(b.data) >= batchBytes || len(b.Items) >= BatchRecords {
			send()
		}
	}
}

// Long reports a record that is a long line of its own (Reader.TakeLong
// handed it over): the sequence function may keep its Data past the batch.
func (it *Item[T]) Long() bool { return it.end < 0 && it.Err == nil }

// inputError is err's *InputError, or nil. The variable errors.As fills
// escapes to the heap: declared for every record, it would cost an
// allocation each.
func inputError(err error) *InputError {
	var ie *InputError
	errors.As(err, &ie)
	return ie
}
