package minhash

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"

	"github.com/bits-and-blooms/bloom/v3"

	"tokenmill/lib/jsonl"
)

// Index holds the signatures of the texts kept so far and finds, for a new
// signature, the kept one most similar to it among those sharing a band.
//
// The newest texts are held in memory: their signatures (4 bytes a value),
// their ids and an open-addressing table of their band keys (12 bytes a
// slot, at most 3/4 full). When that part passes Options.Memory it is
// spilled: signatures and ids are appended to a file, and the band keys are
// written as one sorted run, of which only a bloom filter (about 1.2 bytes
// a key) and every 256th key stay in memory. A query reads a run only
// where its bloom filter says the key may be, so the answers are the same
// whatever the budget, and only slower past it. Runs are merged eight at a
// time (a run of level L+1 from eight of level L), so a query tests at
// most 7 runs of each level, and the runs' disk space is about 12 bytes a
// band key.
//
// The spill files are unlinked as soon as they are made, so nothing is
// left on disk on any exit, a killed process's included.
type Index struct {
	p   Params
	opt Options

	chunkTexts int // signatures a chunk of sigs holds

	n    uint32 // texts held, spilled ones included; refs are 0..n-1
	base uint32 // the first ref in memory

	// The in-memory part, refs base..n-1.
	sigs  [][]uint32 // chunks of chunkTexts signatures, K values each
	ids   []byte
	idEnd []uint32 // where each id ends in ids
	table table

	// The spilled part, refs 0..base-1.
	runs    []*run
	sigFile *os.File // per ref: K values, uint64 id offset, uint32 id length (LE)
	idFile  *os.File
	idOff   int64
	locs    [][]uint64 // the bloom locations of the query's keys

	keys []uint64 // scratch
	cand []uint32
	buf  []byte
	sig  Signature
	id   []byte
}

// Options bound an Index.
type Options struct {
	// Memory is the most bytes the in-memory part (signatures, ids, band
	// table) may hold before it is spilled to disk; 0 never spills.
	Memory int64
	// Dir is where spill files are made (os.TempDir() when empty).
	Dir string
}

// Match is the kept text most similar to a query.
type Match struct {
	Ref        uint32  // its number, in the order texts were inserted
	ID         []byte  // the id it was inserted with (valid until the next call)
	Agree      int     // signature positions that agree
	Similarity float64 // Agree / K
}

// NewIndex returns an empty Index for p, which must be valid.
func NewIndex(p Params, opt Options) *Index {
	if err := p.Validate(); err != nil {
		panic("minhash: " + err.Error())
	}
	// A chunk of signatures is at most an eighth of the budget, so that
	// a small budget is not spent by one chunk.
	chunk := 1024
	if opt.Memory > 0 {
		chunk = int(max(16, min(1024, opt.Memory/int64(32*p.K()))))
	}
	return &Index{p: p, opt: opt, chunkTexts: chunk}
}

// BytesPerText is what one text takes in memory beside its id: its
// signature and its band keys at the table's mean load (in a table between
// 3/8 and 3/4 full, a band key takes 16 to 32 bytes; 21 on average is
// charged), and the 4 bytes that end its id.
func (p Params) BytesPerText() int { return 4*p.K() + 4 + p.Bands*21 }

// SpilledBytesPerText is what a spilled text keeps in memory: its band
// keys' bits in its run's bloom filter, and its share of the run's sparse
// keys.
func (p Params) SpilledBytesPerText() float64 {
	return float64(p.Bands) * (float64(bloomBits)/8 + 8.0/blockEntries)
}

// Len is the number of texts inserted.
func (x *Index) Len() int { return int(x.n) }

// Spilled is the number of texts whose band keys are on disk.
func (x *Index) Spilled() int { return int(x.base) }

// Runs is the number of sorted runs spilled.
func (x *Index) Runs() int { return len(x.runs) }

// MemoryBytes is what the in-memory part holds now (signatures, ids and
// band slots), and what the spilled runs keep in memory.
func (x *Index) MemoryBytes() (inMemory, spilled int64) {
	inMemory = int64(len(x.sigs)*x.chunkTexts*x.p.K())*4 + int64(len(x.ids)) + int64(len(x.idEnd))*4 + int64(len(x.table.keys))*12
	for _, r := range x.runs {
		spilled += int64(r.bloom.Cap()/8) + int64(len(r.sparse))*8
	}
	return inMemory, spilled
}

// Insert adds sig (of length K) with id, and returns its ref.
func (x *Index) Insert(sig Signature, id []byte) (uint32, error) {
	if len(sig) != x.p.K() {
		return 0, ErrParams
	}
	if x.n == ^uint32(0) {
		return 0, fmt.Errorf("minhash: an index holds at most %d texts", ^uint32(0))
	}
	ref := x.n
	x.n++
	if i := int(ref - x.base); i%x.chunkTexts == 0 {
		// Signatures go in chunks, never moved once written: no copy as
		// they grow, and a chunk's memory is counted whole.
		if c := i / x.chunkTexts; c < cap(x.sigs) && cap(x.sigs[:c+1][c]) > 0 {
			x.sigs = x.sigs[:c+1] // a chunk kept from before a spill
		} else {
			x.sigs = append(x.sigs, make([]uint32, x.chunkTexts*x.p.K()))
		}
	}
	copy(x.chunk(ref-x.base), sig)
	x.ids = append(x.ids, id...)
	x.idEnd = append(x.idEnd, uint32(len(x.ids)))
	x.keys = x.p.BandKeys(x.keys[:0], sig)
	for _, k := range x.keys {
		x.table.insert(k, ref)
	}
	if in, _ := x.MemoryBytes(); x.opt.Memory > 0 && in > x.opt.Memory {
		return ref, x.spill()
	}
	return ref, nil
}

// Query returns the kept text most similar to sig among those that share
// a band with it (ties go to the earliest), if its estimated similarity is
// at least threshold.
func (x *Index) Query(sig Signature, threshold float64) (Match, bool, error) {
	if len(sig) != x.p.K() {
		return Match{}, false, ErrParams
	}
	x.keys = x.p.BandKeys(x.keys[:0], sig)
	x.cand = x.cand[:0]
	for i, k := range x.keys {
		if k == 0 {
			x.keys[i] = 1 // as stored
		}
		x.cand = x.table.lookup(x.keys[i], x.cand)
	}
	if len(x.runs) > 0 {
		x.locs = x.locs[:0]
		var kb [8]byte
		for _, k := range x.keys {
			binary.LittleEndian.PutUint64(kb[:], k)
			x.locs = append(x.locs, bloom.Locations(kb[:], bloomHashes))
		}
		for _, r := range x.runs {
			for i, k := range x.keys {
				if !r.bloom.TestLocations(x.locs[i]) {
					continue
				}
				var err error
				if x.cand, err = x.lookupRun(r, k, x.cand); err != nil {
					return Match{}, false, err
				}
			}
		}
	}
	if len(x.cand) == 0 {
		return Match{}, false, nil
	}
	slices.Sort(x.cand)
	x.cand = slices.Compact(x.cand)
	need := Need(threshold, len(sig))
	best := Match{Agree: -1}
	for _, ref := range x.cand {
		other, err := x.signature(ref)
		if err != nil {
			return Match{}, false, err
		}
		if a := Agree(sig, other); a > best.Agree {
			best = Match{Ref: ref, Agree: a}
			if a == len(sig) {
				break // none can be closer, and later ones lose ties
			}
		}
	}
	if best.Agree < need {
		return Match{}, false, nil
	}
	best.Similarity = float64(best.Agree) / float64(len(sig))
	var err error
	best.ID, err = x.idOf(best.Ref)
	return best, err == nil, err
}

// Need is the fewest agreeing positions, of k, whose share is at least
// threshold.
func Need(threshold float64, k int) int {
	n := int(threshold*float64(k) - 1e-9)
	for float64(n) < threshold*float64(k)-1e-9 {
		n++
	}
	return max(n, 0)
}

// Each calls fn with every text held, in ref order. sig and id are valid
// only during the call.
func (x *Index) Each(fn func(ref uint32, sig Signature, id []byte) error) error {
	for ref := range x.n {
		sig, err := x.signature(ref)
		if err != nil {
			return err
		}
		id, err := x.idOf(ref)
		if err != nil {
			return err
		}
		if err := fn(ref, sig, id); err != nil {
			return err
		}
	}
	return nil
}

// Close lets go of the spill files.
func (x *Index) Close() error {
	var first error
	files := []*os.File{x.sigFile, x.idFile}
	for _, r := range x.runs {
		files = append(files, r.file)
	}
	for _, f := range files {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	x.sigFile, x.idFile, x.runs = nil, nil, nil
	return first
}

func (x *Index) recordSize() int64 { return int64(4*x.p.K() + 12) }

// chunk returns the signature of the i-th text in memory.
func (x *Index) chunk(i uint32) Signature {
	k := x.p.K()
	n := uint32(x.chunkTexts)
	c := x.sigs[i/n]
	j := int(i%n) * k
	return c[j : j+k : j+k]
}

// signature returns ref's signature (valid until the next call).
func (x *Index) signature(ref uint32) (Signature, error) {
	k := x.p.K()
	if ref >= x.base {
		return x.chunk(ref - x.base), nil
	}
	if err := x.readRecord(ref); err != nil {
		return nil, err
	}
	x.sig = x.sig[:0]
	for i := range k {
		x.sig = append(x.sig, binary.LittleEndian.Uint32(x.buf[4*i:]))
	}
	return x.sig, nil
}

func (x *Index) readRecord(ref uint32) error {
	size := x.recordSize()
	x.buf = slices.Grow(x.buf[:0], int(size))[:size]
	if _, err := x.sigFile.ReadAt(x.buf, int64(ref)*size); err != nil {
		return fmt.Errorf("minhash: reading a spilled signature: %w", err)
	}
	return nil
}

// idOf returns ref's id (valid until the next call).
func (x *Index) idOf(ref uint32) ([]byte, error) {
	if ref >= x.base {
		i := ref - x.base
		start := uint32(0)
		if i > 0 {
			start = x.idEnd[i-1]
		}
		return x.ids[start:x.idEnd[i]], nil
	}
	if err := x.readRecord(ref); err != nil {
		return nil, err
	}
	k := 4 * x.p.K()
	off, n := binary.LittleEndian.Uint64(x.buf[k:]), binary.LittleEndian.Uint32(x.buf[k+8:])
	x.id = slices.Grow(x.id[:0], int(n))[:n]
	if _, err := x.idFile.ReadAt(x.id, int64(off)); err != nil {
		return nil, fmt.Errorf("minhash: reading a spilled id: %w", err)
	}
	return x.id, nil
}

// table is an open-addressing multimap from band key to ref, linear
// probing; key 0 marks an empty slot (a key of 0 is stored as 1).
type table struct {
	keys  []uint64
	refs  []uint32
	count int
}

func (t *table) insert(k uint64, ref uint32) {
	if k == 0 {
		k = 1
	}
	if 4*(t.count+1) > 3*len(t.keys) {
		t.grow()
	}
	mask := uint64(len(t.keys) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		if t.keys[i] == 0 {
			t.keys[i], t.refs[i] = k, ref
			t.count++
			return
		}
	}
}

func (t *table) lookup(k uint64, dst []uint32) []uint32 {
	if k == 0 {
		k = 1
	}
	if len(t.keys) == 0 {
		return dst
	}
	mask := uint64(len(t.keys) - 1)
	for i := k & mask; t.keys[i] != 0; i = (i + 1) & mask {
		if t.keys[i] == k {
			dst = append(dst, t.refs[i])
		}
	}
	return dst
}

func (t *table) grow() {
	old, oldRefs := t.keys, t.refs
	n := max(1024, 2*len(old))
	t.keys, t.refs, t.count = make([]uint64, n), make([]uint32, n), 0
	for i, k := range old {
		if k != 0 {
			t.insert(k, oldRefs[i])
		}
	}
}

// reset empties t and lets its slots go: the next in-memory part grows
// its own, so a table never holds more slots than its part needs.
func (t *table) reset() {
	*t = table{}
}

// A run is one spilled table: its (key, ref) entries sorted, in a file
// of its own, with a bloom filter of its keys and the first key of every
// block of blockEntries entries.
type run struct {
	file    *os.File
	level   int
	entries int
	bloom   *bloom.BloomFilter
	sparse  []uint64
}

const (
	blockEntries = 256
	entrySize    = 12
	bloomBits    = 10 // a key: about 1% of lookups read a block in vain
	bloomHashes  = 7
	mergeRuns    = 8 // runs of one level merged into one of the next
)

// lookupRun appends the refs stored under k (not 0) in r to dst.
func (x *Index) lookupRun(r *run, k uint64, dst []uint32) ([]uint32, error) {
	// Equal keys may cross into the next block, so the search starts at
	// the last block that begins below k.
	b := max(sort.Search(len(r.sparse), func(i int) bool { return r.sparse[i] >= k })-1, 0)
	for ; b < len(r.sparse); b++ {
		n := min(blockEntries, r.entries-b*blockEntries)
		x.buf = slices.Grow(x.buf[:0], n*entrySize)[:n*entrySize]
		if _, err := r.file.ReadAt(x.buf, int64(b*blockEntries*entrySize)); err != nil {
			return dst, fmt.Errorf("minhash: reading a spilled run: %w", err)
		}
		for i := range n {
			e := x.buf[i*entrySize:]
			switch key := binary.LittleEndian.Uint64(e); {
			case key == k:
				dst = append(dst, binary.LittleEndian.Uint32(e[8:]))
			case key > k:
				return dst, nil
			}
		}
	}
	return dst, nil
}

// runWriter writes a run's sorted entries to a new spill file.
type runWriter struct {
	r *run
	w *bufio.Writer
	n int
	e [entrySize]byte
}

func (x *Index) newRun(level, entries int) (*runWriter, error) {
	f, err := x.spillFile()
	if err != nil {
		return nil, err
	}
	r := &run{file: f, level: level, bloom: bloom.New(uint(max(64, bloomBits*entries)), bloomHashes)}
	return &runWriter{r: r, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

func (rw *runWriter) add(key uint64, ref uint32) {
	if rw.n%blockEntries == 0 {
		rw.r.sparse = append(rw.r.sparse, key)
	}
	rw.n++
	binary.LittleEndian.PutUint64(rw.e[:], key)
	binary.LittleEndian.PutUint32(rw.e[8:], ref)
	rw.w.Write(rw.e[:])
	rw.r.bloom.Add(rw.e[:8])
}

func (rw *runWriter) finish() (*run, error) {
	if err := rw.w.Flush(); err != nil {
		rw.r.file.Close()
		return nil, fmt.Errorf("minhash: spilling band keys: %w", err)
	}
	rw.r.entries = rw.n
	return rw.r, nil
}

// merge replaces the last mergeRuns runs, all of one level, by one run of
// the next level, as long as there are such runs.
func (x *Index) merge() error {
	for len(x.runs) >= mergeRuns {
		tail := x.runs[len(x.runs)-mergeRuns:]
		level := tail[0].level
		if slices.ContainsFunc(tail, func(r *run) bool { return r.level != level }) {
			return nil
		}
		total := 0
		readers := make([]*bufio.Reader, len(tail))
		heads := make([][entrySize]byte, len(tail))
		left := make([]int, len(tail))
		for i, r := range tail {
			total += r.entries
			readers[i] = bufio.NewReaderSize(io.NewSectionReader(r.file, 0, int64(r.entries*entrySize)), 1<<16)
			left[i] = r.entries
		}
		rw, err := x.newRun(level+1, total)
		if err != nil {
			return err
		}
		next := func(i int) error {
			if left[i] == 0 {
				return nil
			}
			left[i]--
			_, err := io.ReadFull(readers[i], heads[i][:])
			return err
		}
		for i := range tail {
			if left[i] == 0 {
				left[i] = -1 // no head
				continue
			}
			if err := next(i); err != nil {
				rw.r.file.Close()
				return fmt.Errorf("minhash: merging runs: %w", err)
			}
		}
		// Eight heads: a linear scan for the least (key, ref) is enough.
		for range total {
			best := -1
			var bk uint64
			var br uint32
			for i := range tail {
				if left[i] < 0 {
					continue
				}
				k, r := binary.LittleEndian.Uint64(heads[i][:]), binary.LittleEndian.Uint32(heads[i][8:])
				if best < 0 || k < bk || (k == bk && r < br) {
					best, bk, br = i, k, r
				}
			}
			rw.add(bk, br)
			if left[best] == 0 {
				left[best] = -1
			} else if err := next(best); err != nil {
				rw.r.file.Close()
				return fmt.Errorf("minhash: merging runs: %w", err)
			}
		}
		merged, err := rw.finish()
		if err != nil {
			return err
		}
		for _, r := range tail {
			r.file.Close() // unlinked: its space is freed
		}
		x.runs = append(x.runs[:len(x.runs)-mergeRuns], merged)
	}
	return nil
}

// spill writes the in-memory part to the spill files and empties it.
func (x *Index) spill() error {
	if x.sigFile == nil {
		if err := x.openSpill(); err != nil {
			return err
		}
	}
	// Signatures and ids, in ref order.
	size := x.recordSize()
	w := bufio.NewWriterSize(io.NewOffsetWriter(x.sigFile, int64(x.base)*size), 1<<16)
	idw := bufio.NewWriterSize(io.NewOffsetWriter(x.idFile, x.idOff), 1<<16)
	k := x.p.K()
	rec := make([]byte, size)
	start := uint32(0)
	for i, end := range x.idEnd {
		for j, v := range x.chunk(uint32(i)) {
			binary.LittleEndian.PutUint32(rec[4*j:], v)
		}
		binary.LittleEndian.PutUint64(rec[4*k:], uint64(x.idOff))
		binary.LittleEndian.PutUint32(rec[4*k+8:], end-start)
		w.Write(rec)
		idw.Write(x.ids[start:end])
		x.idOff += int64(end - start)
		start = end
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("minhash: spilling signatures: %w", err)
	}
	if err := idw.Flush(); err != nil {
		return fmt.Errorf("minhash: spilling ids: %w", err)
	}

	// The band keys, as one sorted run.
	type entry struct {
		key uint64
		ref uint32
	}
	entries := make([]entry, 0, x.table.count)
	for i, key := range x.table.keys {
		if key != 0 {
			entries = append(entries, entry{key, x.table.refs[i]})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		return int(a.ref) - int(b.ref)
	})
	rw, err := x.newRun(0, len(entries))
	if err != nil {
		return err
	}
	for _, en := range entries {
		rw.add(en.key, en.ref)
	}
	r, err := rw.finish()
	if err != nil {
		return err
	}
	x.runs = append(x.runs, r)
	x.base = x.n
	x.sigs, x.ids, x.idEnd = x.sigs[:0], x.ids[:0], x.idEnd[:0] // chunks are reused
	x.table.reset()
	return x.merge()
}

// openSpill makes the signature and id files.
func (x *Index) openSpill() error {
	var err error
	if x.sigFile, err = x.spillFile(); err != nil {
		return err
	}
	if x.idFile, err = x.spillFile(); err != nil {
		x.sigFile.Close()
		x.sigFile = nil
		return err
	}
	return nil
}

// spillFile makes a spill file in Dir that has no name (jsonl.CreateSpill):
// nothing of it is left on disk once it is closed or the process ends.
func (x *Index) spillFile() (*os.File, error) {
	f, err := jsonl.CreateSpill(x.opt.Dir, "tokenmill-minhash-*")
	if err != nil {
		return nil, fmt.Errorf("minhash: making a spill file: %w", err)
	}
	return f, nil
}

// Params are the Index's.
func (x *Index) Params() Params { return x.p }
