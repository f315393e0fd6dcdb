//go:build unix

package ledger

import (
	"syscall"
	"unsafe"
)

// offHeap holds the table arrays of a page or more outside the Go heap,
// in anonymous private mappings: they hold no pointers, and on the heap
// they would be most of what the garbage collector counts live, so it would
// let the run's garbage grow as large again before it collects (GOGC).
// It keeps each mapping it made, keyed by its first word, so that what is
// still mapped when the ledger is dropped can be unmapped.
type offHeap struct {
	mapped map[*uint64][]byte
	bytes  int
}

var pageSize = syscall.Getpagesize()

// alloc returns n zeroed words: mapped when they fill a page or more.
func (m *offHeap) alloc(n int) []uint64 {
	size := n * 8
	if size < pageSize {
		return make([]uint64, n)
	}
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]uint64, n) // no mapping to be had: the heap still serves
	}
	s := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
	if m.mapped == nil {
		m.mapped = make(map[*uint64][]byte)
	}
	m.mapped[unsafe.SliceData(s)] = b
	m.bytes += size
	return s
}

// free unmaps s if alloc mapped it; the garbage collector has the rest.
func (m *offHeap) free(s []uint64) {
	b, ok := m.mapped[unsafe.SliceData(s)]
	if !ok {
		return
	}
	delete(m.mapped, unsafe.SliceData(s))
	m.bytes -= len(b)
	munmap(b)
}

// release unmaps everything still mapped: the ledger is gone.
func (m *offHeap) release() {
	for _, b := range m.mapped {
		munmap(b)
	}
	clear(m.mapped)
	m.bytes = 0
}

func munmap(b []byte) {
	// Every mapping is unmapped once, whole: an error is a bug.
	if err := syscall.Munmap(b); err != nil {
		panic("ledger: munmap: " + err.Error())
	}
}
