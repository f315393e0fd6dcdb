// Package minheap is a binary min-heap of ordered values in a plain
// slice: container/heap's interface calls and boxing cost more than the
// work of the loops that use one (a tokenizer's merges, the plays of a
// run's end).
package minheap

import "cmp"

// Heap is a min-heap: h[0] is the least value. The zero value is empty.
type Heap[T cmp.Ordered] []T

// Push adds v.
func (h *Heap[T]) Push(v T) {
	*h = append(*h, v)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

// Pop removes and returns the least value; the heap must not be empty.
func (h *Heap[T]) Pop() T {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(a) && a[l] < a[small] {
			small = l
		}
		if l+1 < len(a) && a[l+1] < a[small] {
			small = l + 1
		}
		if small == i {
			break
		}
		a[i], a[small] = a[small], a[i]
		i = small
	}
	*h = a
	return top
}
