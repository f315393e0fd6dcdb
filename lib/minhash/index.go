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
// whatever the budget, and only slower past it.
//
// The spill files are unlinked as soon as they are made, so nothing is
// left on disk on any exit, a killed process's included.
type Index struct {
	p   Params
	opt Options

	n    uint32 // texts held, spilled ones included; refs are 0..n-1
	base uint32 // the first ref in memory

	// The in-memory part, refs base..n-1.
	sigs  []uint32 // K values each
	ids   []byte
	idEnd []uint32 // where each id ends in ids
	table table

	// The spilled part, refs 0..base-1.
	runs    []*run
	sigFile *os.File // per ref: K values, uint64 id offset, uint32 id length (LE)
	idFile  *os.File
	runFile *os.File
	idOff   int64
	runOff  int64

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
	return &Index{p: p, opt: opt}
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
	inMemory = int64(len(x.sigs))*4 + int64(len(x.ids)) + int64(len(x.idEnd))*4 + int64(len(x.table.keys))*12
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
	x.sigs = append(x.sigs, sig...)
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
	for _, k := range x.keys {
		x.cand = x.table.lookup(k, x.cand)
		for _, r := range x.runs {
			var err error
			if x.cand, err = x.lookupRun(r, k, x.cand); err != nil {
				return Match{}, false, err
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
	for _, f := range []*os.File{x.sigFile, x.idFile, x.runFile} {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	x.sigFile, x.idFile, x.runFile = nil, nil, nil
	return first
}

func (x *Index) recordSize() int64 { return int64(4*x.p.K() + 12) }

// signature returns ref's signature (valid until the next call).
func (x *Index) signature(ref uint32) (Signature, error) {
	k := x.p.K()
	if ref >= x.base {
		i := int(ref-x.base) * k
		return x.sigs[i : i+k], nil
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

// A run is one spilled table: its (key, ref) entries sorted, in runFile
// from off, with a bloom filter of its keys and the first key of every
// block of blockEntries entries.
type run struct {
	off     int64
	entries int
	bloom   *bloom.BloomFilter
	sparse  []uint64
}

const (
	blockEntries = 256
	entrySize    = 12
	bloomBits    = 10 // a key: about 1% of lookups read a block in vain
)

// lookupRun appends the refs stored under k in r to dst.
func (x *Index) lookupRun(r *run, k uint64, dst []uint32) ([]uint32, error) {
	if k == 0 {
		k = 1
	}
	var kb [8]byte
	binary.LittleEndian.PutUint64(kb[:], k)
	if !r.bloom.Test(kb[:]) {
		return dst, nil
	}
	// The first block that may hold k: the one before the first block
	// starting above k... or at k, since equal keys may cross blocks.
	b := max(sort.Search(len(r.sparse), func(i int) bool { return r.sparse[i] >= k })-1, 0)
	for ; b < len(r.sparse); b++ {
		n := min(blockEntries, r.entries-b*blockEntries)
		x.buf = slices.Grow(x.buf[:0], n*entrySize)[:n*entrySize]
		if _, err := x.runFile.ReadAt(x.buf, r.off+int64(b*blockEntries*entrySize)); err != nil {
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
		for j, v := range x.sigs[i*k : (i+1)*k] {
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
	r := &run{off: x.runOff, entries: len(entries), bloom: bloom.New(uint(max(64, bloomBits*len(entries))), 7)}
	rw := bufio.NewWriterSize(io.NewOffsetWriter(x.runFile, x.runOff), 1<<16)
	var e [entrySize]byte
	for i, en := range entries {
		if i%blockEntries == 0 {
			r.sparse = append(r.sparse, en.key)
		}
		binary.LittleEndian.PutUint64(e[:], en.key)
		binary.LittleEndian.PutUint32(e[8:], en.ref)
		rw.Write(e[:])
		r.bloom.Add(e[:8])
	}
	if err := rw.Flush(); err != nil {
		return fmt.Errorf("minhash: spilling band keys: %w", err)
	}
	x.runOff += int64(len(entries) * entrySize)
	x.runs = append(x.runs, r)

	x.base = x.n
	x.sigs, x.ids, x.idEnd = x.sigs[:0], x.ids[:0], x.idEnd[:0]
	x.table.reset()
	return nil
}

// openSpill makes the spill files in a new directory under Dir, and
// unlinks them and the directory at once: the open descriptors keep them
// until Close or the process's end.
func (x *Index) openSpill() error {
	dir, err := os.MkdirTemp(x.opt.Dir, "tokenmill-minhash-*")
	if err != nil {
		return fmt.Errorf("minhash: making a spill directory: %w", err)
	}
	defer os.RemoveAll(dir)
	files := make([]*os.File, 3)
	for i, name := range []string{"signatures", "ids", "runs"} {
		f, err := os.OpenFile(dir+string(os.PathSeparator)+name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			for _, g := range files[:i] {
				g.Close()
			}
			return fmt.Errorf("minhash: making a spill file: %w", err)
		}
		os.Remove(f.Name())
		files[i] = f
	}
	x.sigFile, x.idFile, x.runFile = files[0], files[1], files[2]
	return nil
}

// Params are the Index's.
func (x *Index) Params() Params { return x.p }
