package merge

import (
	"cmp"
	"io"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"
)

// entry is everything merge keeps of one (id, sample).
type entry struct {
	id      string
	sample  int
	numeric bool      // the id is a JSON integer
	owned   bool      // data may be kept as it is (a long line taken from the reader), not copied
	prompt  bool      // a prompt record with this key was read (--prompts)
	head    bool      // this key is the first sample of its prompt record
	rank    uint8     // of the best answer; rankNone if there is none
	digest  uint64    // of the best answer's output, to recognise filter's reject of it
	order   int64     // place in the input of the first record with this key
	seq     int64     // place of the best answer
	cut     cutCounts // what --to leaves out of the best answer, a cut conversation
	group   uint32    // the best answer's settings (settings.go)
	// data is the best answer's record, or with --missing the first
	// prompt record (answers are then only ranked, not kept).
	data []byte
	// src, when not 0, says that the record is not held but read back
	// when written (readback.go): the index+1 of its file among
	// merger.sources, where it starts, its length and the xxh3 hash of
	// its bytes.
	src  int32
	size uint32
	off  int64
	sum  uint64
}

type key struct {
	id     string
	sample int
}

const (
	// entryOverhead is what an entry costs beside its id and data: the
	// struct, its map slot and slice headers, roughly.
	entryOverhead = 150
	// fanout is how many partitions a table spills into.
	fanout = 16
	// maxLevel stops repartitioning: a table this deep holds so few keys
	// per partition that going over budget cannot be helped by splitting.
	maxLevel = 8
)

// table resolves entries in memory until its budget is exceeded, then
// spills them into hash partitions by key and goes on; at the end each
// partition is resolved by a table one level down. Every key lands in one
// partition, so partitions resolve independently.
type table struct {
	m     *merger
	level int
	// index finds an entry by the hash of its key; the rare key whose
	// hash an earlier key of the table has is found in collided instead.
	index    map[uint64]int32
	collided map[key]int32
	entries  entryBlocks
	used     int64
	parts    []*spillFile // nil until the first spill
}

func (m *merger) newTable(level int) *table {
	return &table{m: m, level: level, index: map[uint64]int32{}}
}

// add folds e into the table. e.data may alias a buffer reused by the
// caller: the table copies what it keeps.
func (t *table) add(e *entry) error {
	h := keyHash(e.id, e.sample)
	i, found := t.index[h]
	clash := found && (t.entries.at(i).id != e.id || t.entries.at(i).sample != e.sample)
	if clash {
		// Another key holds the hash: this one is looked up by itself.
		i, found = t.collided[key{e.id, e.sample}]
	}
	if found {
		t.absorb(t.entries.at(i), e)
	} else {
		n := *e
		n.data, n.owned = nil, false
		switch {
		case e.owned:
			n.data = e.data
		case len(e.data) > 0:
			n.data = append(make([]byte, 0, len(e.data)), e.data...)
		}
		at := int32(t.entries.n)
		if clash {
			if t.collided == nil {
				t.collided = map[key]int32{}
			}
			t.collided[key{e.id, e.sample}] = at
		} else {
			t.index[h] = at
		}
		t.entries.add(&n)
		t.used += entryOverhead + int64(len(n.id)) + int64(cap(n.data))
	}
	if t.used > t.m.budget && t.entries.n > 1 && t.level < maxLevel {
		return t.spill()
	}
	return nil
}

// absorb applies the precedence rules: the better answer wins, and among
// equals the one read last; the first prompt record of a key is kept.
func (t *table) absorb(old, e *entry) {
	if old.prompt && e.head {
		t.m.dupPrompts++ // once per repeated prompt record, not per sample
	}
	takePrompt := t.m.missing && e.prompt && (!old.prompt || e.order < old.order)
	old.order = min(old.order, e.order)
	old.prompt = old.prompt || e.prompt
	old.head = old.head || e.head
	if e.rank == rankRejected && old.rank > rankRejected && old.digest == e.digest {
		// filter's reject of the answer held: the reject takes its place.
		old.rank = rankDropped
		t.m.droppedN++
	}
	if e.rank > rankNone && (e.rank > old.rank || e.rank == old.rank && e.seq > old.seq) {
		old.rank, old.seq, old.digest, old.cut, old.group = e.rank, e.seq, e.digest, e.cut, e.group
		if !t.m.missing {
			t.setData(old, e)
		}
	}
	if takePrompt {
		t.setData(old, e)
	}
}

func (t *table) setData(old, e *entry) {
	t.used -= int64(cap(old.data))
	old.src, old.size, old.off, old.sum = e.src, e.size, e.off, e.sum
	switch {
	case e.src != 0:
		old.data = nil
	case e.owned:
		old.data = e.data
	default:
		old.data = append(old.data[:0], e.data...)
	}
	t.used += int64(cap(old.data))
}

// keyHash is what the table's index finds a key by (a variable, so that
// tests can make every key collide).
var keyHash = func(id string, sample int) uint64 {
	return xxh3.HashStringSeed(id, uint64(sample))
}

// partition picks the spill file of a key at this level; each level hashes
// with its own seed, so a partition splits again evenly one level down.
func (t *table) partition(e *entry) int {
	return int(xxh3.HashStringSeed(e.id, uint64(t.level)<<32|uint64(e.sample)) % fanout)
}

// spill writes every entry to its partition and empties the table.
// Partition files are created when first needed.
func (t *table) spill() error {
	if t.parts == nil {
		t.parts = make([]*spillFile, fanout)
	}
	for i := range t.entries.n {
		e := t.entries.at(int32(i))
		k := t.partition(e)
		if t.parts[k] == nil {
			f, err := t.m.newSpillFile()
			if err != nil {
				return err
			}
			t.parts[k] = f
		}
		if err := t.parts[k].write(e); err != nil {
			return err
		}
	}
	t.m.spills++
	t.entries.reset()
	clear(t.index)
	t.collided = nil
	t.used = 0
	return nil
}

// sorted is the order of the entries to emit, or nil when it is the order
// they were added in (first appearance, without --sort).
func (t *table) sorted() []int32 {
	n := t.entries.n
	inOrder := true
	for i := 1; i < n && inOrder; i++ {
		inOrder = t.m.compare(t.entries.at(int32(i-1)), t.entries.at(int32(i))) < 0
	}
	if inOrder {
		return nil
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return t.m.compare(t.entries.at(a), t.entries.at(b)) })
	return order
}

// entryBlocks holds a table's entries in blocks of a fixed size: growing
// copies none of them and never holds two arrays of them at once.
type entryBlocks struct {
	blocks [][]entry
	n      int
}

const entryBlock = 4096

func (b *entryBlocks) at(i int32) *entry { return &b.blocks[i/entryBlock][i%entryBlock] }

func (b *entryBlocks) add(e *entry) {
	if b.n == len(b.blocks)*entryBlock {
		b.blocks = append(b.blocks, make([]entry, entryBlock))
	}
	*b.at(int32(b.n)) = *e
	b.n++
}

// reset empties the blocks, kept for the entries to come.
func (b *entryBlocks) reset() {
	for _, blk := range b.blocks {
		clear(blk)
	}
	b.n = 0
}

// finish hands every resolved entry to emit, in the merger's order.
func (t *table) finish(emit func(*entry) error) error {
	if t.parts == nil {
		order := t.sorted()
		for i := range t.entries.n {
			if err := t.m.check(i); err != nil {
				return err
			}
			e := t.entries.at(int32(i))
			if order != nil {
				e = t.entries.at(order[i])
			}
			if err := emit(e); err != nil {
				return err
			}
		}
		return nil
	}
	if err := t.spill(); err != nil {
		return err
	}
	t.entries, t.index, t.collided = entryBlocks{}, nil, nil
	var runs []*spillFile
	defer func() {
		for _, f := range append(runs, t.parts...) {
			if f != nil {
				f.remove()
			}
		}
	}()
	for i, part := range t.parts {
		if part == nil {
			continue
		}
		run, err := t.resolvePartition(part)
		if err != nil {
			return err
		}
		t.parts[i] = nil
		runs = append(runs, run)
	}
	return t.m.mergeRuns(runs, emit)
}

// resolvePartition reads a partition into a table one level down and
// writes its resolved entries, in order, to a run file.
func (t *table) resolvePartition(part *spillFile) (*spillFile, error) {
	defer part.remove()
	if err := part.finishWriting(); err != nil {
		return nil, err
	}
	child := t.m.newTable(t.level + 1)
	r, err := part.open()
	if err != nil {
		return nil, err
	}
	for n := 0; ; n++ {
		if err := t.m.check(n); err != nil {
			return nil, err
		}
		e, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := child.add(e); err != nil {
			return nil, err
		}
	}
	run, err := t.m.newSpillFile()
	if err != nil {
		return nil, err
	}
	if err := child.finish(run.write); err != nil {
		run.remove()
		return nil, err
	}
	if err := run.finishWriting(); err != nil {
		run.remove()
		return nil, err
	}
	return run, nil
}

// compare orders output: by place of first appearance, or with --sort by
// id (integer ids numerically, before string ids in byte order), then
// sample.
func (m *merger) compare(a, b *entry) int {
	if !m.sortByID {
		return cmp.Compare(a.order, b.order)
	}
	if c := compareIDs(a.id, a.numeric, b.id, b.numeric); c != 0 {
		return c
	}
	return cmp.Compare(a.sample, b.sample)
}

func compareIDs(a string, an bool, b string, bn bool) int {
	switch {
	case an && !bn:
		return -1
	case !an && bn:
		return 1
	case !an:
		return strings.Compare(a, b)
	}
	aneg, bneg := strings.HasPrefix(a, "-"), strings.HasPrefix(b, "-")
	if aneg != bneg {
		if aneg {
			return -1
		}
		return 1
	}
	a, b = strings.TrimPrefix(a, "-"), strings.TrimPrefix(b, "-")
	c := cmp.Compare(len(a), len(b))
	if c == 0 {
		c = strings.Compare(a, b)
	}
	if aneg {
		return -c
	}
	return c
}
