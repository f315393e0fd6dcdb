//go:build !unix

package ledger

// offHeap, without mmap, takes every array from the Go heap.
type offHeap struct{ bytes int }

func (m *offHeap) alloc(n int) []uint64 { return make([]uint64, n) }
func (m *offHeap) free([]uint64)        {}
func (m *offHeap) release()             {}
