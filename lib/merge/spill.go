package merge

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/s2"

	"tokenmill/lib/jsonl"
)

const (
	spillBufferSize = 64 << 10
	spillBlockSize  = 256 << 10
)

// spillFile holds entries on disk: a partition waiting to be resolved, or
// a run of resolved entries in output order. Each entry is
//
//	order seq (uvarint) rank flags (byte) digest (8 bytes) [cut turns, calls (uvarint)] [src off size (uvarint) sum (8 bytes)] sample len(id) (uvarint) id len(data) (uvarint) data
//
// the cut counts only with flagCut, where a read-back record is only with
// flagAt.
// and the stream is S2-compressed: JSON records shrink several times at
// memory speed, and a merge larger than RAM is bound by the disk. The
// compressor runs beside the reader (two goroutines), so spilling uses the
// second core instead of stalling the parse.
type spillFile struct {
	m     *merger
	f     *os.File
	zw    *s2.Writer
	w     *bufio.Writer
	count int64
	head  []byte
}

const (
	flagNumeric = 1 << iota
	flagPrompt
	flagHead
	flagCut
	flagAt
)

// newSpillFile creates a spill file that has no name (jsonl.CreateSpill):
// it lives only as long as its descriptor, so even a killed merge leaves
// nothing behind.
func (m *merger) newSpillFile() (*spillFile, error) {
	f, err := jsonl.CreateSpill(m.tempParent, "tokenmill-merge-*.spill")
	if err != nil {
		return nil, fmt.Errorf("spill file: %w", err)
	}
	zw := s2.NewWriter(f, s2.WriterConcurrency(2), s2.WriterBlockSize(spillBlockSize))
	return &spillFile{m: m, f: f, zw: zw, w: bufio.NewWriterSize(zw, spillBufferSize)}, nil
}

func (s *spillFile) write(e *entry) error {
	var flags byte
	if e.numeric {
		flags |= flagNumeric
	}
	if e.prompt {
		flags |= flagPrompt
	}
	if e.head {
		flags |= flagHead
	}
	if e.cut != (cutCounts{}) {
		flags |= flagCut
	}
	if e.src != 0 {
		flags |= flagAt
	}
	h := binary.AppendUvarint(s.head[:0], uint64(e.order))
	h = binary.AppendUvarint(h, uint64(e.seq))
	h = append(h, e.rank, flags)
	h = binary.LittleEndian.AppendUint64(h, e.digest)
	h = binary.AppendUvarint(h, uint64(e.group))
	if flags&flagCut != 0 {
		h = binary.AppendUvarint(h, uint64(e.cut.turns))
		h = binary.AppendUvarint(h, uint64(e.cut.calls))
	}
	if flags&flagAt != 0 {
		h = binary.AppendUvarint(h, uint64(e.src))
		h = binary.AppendUvarint(h, uint64(e.off))
		h = binary.AppendUvarint(h, uint64(e.size))
		h = binary.LittleEndian.AppendUint64(h, e.sum)
	}
	h = binary.AppendUvarint(h, uint64(e.sample))
	h = binary.AppendUvarint(h, uint64(len(e.id)))
	h = append(h, e.id...)
	h = binary.AppendUvarint(h, uint64(len(e.data)))
	s.head = h
	s.count++
	s.m.spilled.Add(int64(len(h) + len(e.data)))
	if _, err := s.w.Write(h); err != nil {
		return fmt.Errorf("spill file: %w", err)
	}
	if _, err := s.w.Write(e.data); err != nil {
		return fmt.Errorf("spill file: %w", err)
	}
	return nil
}

// finishWriting flushes what was written so the file can be read back.
func (s *spillFile) finishWriting() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("spill file: %w", err)
	}
	if err := s.zw.Close(); err != nil {
		return fmt.Errorf("spill file: %w", err)
	}
	if size, err := s.f.Seek(0, io.SeekCurrent); err == nil {
		s.m.spilledDisk += size
	}
	s.w, s.zw = nil, nil
	return nil
}

// remove closes the file, which deletes it.
func (s *spillFile) remove() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// open reads the file from the start.
func (s *spillFile) open() (*spillReader, error) {
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("spill file: %w", err)
	}
	return &spillReader{r: s2.NewReader(s.f), left: s.count}, nil
}

// spillReader yields a spill file's entries; each is valid until the next.
type spillReader struct {
	r    *s2.Reader
	left int64
	e    entry
	id   []byte
}

var errCorruptSpill = errors.New("spill file is corrupt (was the temporary directory changed during the merge?)")

func (s *spillReader) next() (*entry, error) {
	if s.left == 0 {
		return nil, io.EOF
	}
	s.left--
	var v [4]uint64
	for i := range 2 {
		n, err := binary.ReadUvarint(s.r)
		if err != nil {
			return nil, errCorruptSpill
		}
		v[i] = n
	}
	rank, err1 := s.r.ReadByte()
	flags, err2 := s.r.ReadByte()
	if err1 != nil || err2 != nil {
		return nil, errCorruptSpill
	}
	var digest [8]byte
	if _, err := io.ReadFull(s.r, digest[:]); err != nil {
		return nil, errCorruptSpill
	}
	group, gerr := binary.ReadUvarint(s.r)
	if gerr != nil || group > 1<<32-1 {
		return nil, errCorruptSpill
	}
	var cut [2]uint64
	for i := range cut {
		if flags&flagCut == 0 {
			break
		}
		n, err := binary.ReadUvarint(s.r)
		if err != nil || n > 1<<32-1 {
			return nil, errCorruptSpill
		}
		cut[i] = n
	}
	var at [3]uint64
	var sum [8]byte
	if flags&flagAt != 0 {
		for i, limit := range [3]uint64{1<<31 - 1, 1<<63 - 1, maxAddressed} {
			n, err := binary.ReadUvarint(s.r)
			if err != nil || n > limit {
				return nil, errCorruptSpill
			}
			at[i] = n
		}
		if _, err := io.ReadFull(s.r, sum[:]); err != nil {
			return nil, errCorruptSpill
		}
	}
	for i := 2; i < 4; i++ {
		n, err := binary.ReadUvarint(s.r)
		if err != nil {
			return nil, errCorruptSpill
		}
		v[i] = n
	}
	var err error
	if s.id, err = readN(s.r, s.id, v[3]); err != nil {
		return nil, err
	}
	size, err := binary.ReadUvarint(s.r)
	if err != nil {
		return nil, errCorruptSpill
	}
	if s.e.data, err = readN(s.r, s.e.data, size); err != nil {
		return nil, err
	}
	s.e = entry{
		id: string(s.id), sample: int(v[2]), numeric: flags&flagNumeric != 0, prompt: flags&flagPrompt != 0, head: flags&flagHead != 0,
		rank: rank, digest: binary.LittleEndian.Uint64(digest[:]), group: uint32(group), order: int64(v[0]), seq: int64(v[1]), data: s.e.data,
		cut: cutCounts{turns: uint32(cut[0]), calls: uint32(cut[1])},
		src: int32(at[0]), off: int64(at[1]), size: uint32(at[2]), sum: binary.LittleEndian.Uint64(sum[:]),
	}
	return &s.e, nil
}

func readN(r io.Reader, buf []byte, n uint64) ([]byte, error) {
	if n > 1<<40 {
		return buf, errCorruptSpill
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, errCorruptSpill
	}
	return buf, nil
}

// mergeRuns emits the entries of sorted runs as one sorted stream.
func (m *merger) mergeRuns(runs []*spillFile, emit func(*entry) error) error {
	h := &runHeap{compare: m.compare}
	for _, run := range runs {
		r, err := run.open()
		if err != nil {
			return err
		}
		e, err := r.next()
		if err == io.EOF {
			continue
		}
		if err != nil {
			return err
		}
		h.items = append(h.items, runCursor{r: r, e: e})
	}
	heap.Init(h)
	for n := 0; h.Len() > 0; n++ {
		if err := m.check(n); err != nil {
			return err
		}
		top := &h.items[0]
		if err := emit(top.e); err != nil {
			return err
		}
		e, err := top.r.next()
		switch {
		case err == io.EOF:
			heap.Pop(h)
		case err != nil:
			return err
		default:
			top.e = e
			heap.Fix(h, 0)
		}
	}
	return nil
}

type runCursor struct {
	r *spillReader
	e *entry
}

type runHeap struct {
	items   []runCursor
	compare func(a, b *entry) int
}

func (h *runHeap) Len() int           { return len(h.items) }
func (h *runHeap) Less(i, j int) bool { return h.compare(h.items[i].e, h.items[j].e) < 0 }
func (h *runHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *runHeap) Push(x any)         { h.items = append(h.items, x.(runCursor)) }
func (h *runHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
