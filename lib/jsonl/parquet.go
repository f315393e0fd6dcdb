package jsonl

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
	"github.com/segmentio/encoding/json"
)

// parquetBatch is how many rows are decoded at a time.
const parquetBatch = 64

// A decoder hands its rows over in chunks of about chunkBytes of JSON (or
// chunkRows rows), each group keeping at most groupChunks of them ready.
const (
	chunkBytes  = 256 << 10
	chunkRows   = 1024
	groupChunks = 2
	maxDecoders = 4
)

// parquetSource yields each row of a Parquet file as one JSON object, its
// fields in schema order. Nested columns become JSON the way a dataset
// author means them: LIST-annotated groups (Hugging Face's
// list<struct<from, value>> conversations) are arrays, MAP groups objects,
// other groups objects, null is null. With a column filter, only the
// top-level fields it names are read and written. Rows are assembled
// straight from the column values and their repetition and definition
// levels, without reflection or maps. Row groups are decoded ahead on a
// goroutine per CPU (at most maxDecoders), each into a few reused chunks of
// JSON, and handed out in file order: memory is bounded by the decoders'
// pages and chunks, whatever the size of the file or of a row group. Line
// is the 1-based row number.
type parquetSource struct {
	name   string
	file   *parquet.File
	closer io.Closer
	stats  *Stats

	root   *pqNode
	leaves []int // the leaf columns read, nil for all

	order chan *pqGroup // row groups in file order, as their decoding starts
	ahead chan struct{} // a slot per row group started and not yet handed out
	free  chan *pqChunk // chunks no one holds
	stop  chan struct{} // closed by close: the goroutines end
	wg    sync.WaitGroup

	cur     *pqGroup // the row group being handed out
	chunk   *pqChunk // its chunk being handed out
	handed  int      // rows of the chunk handed out
	row     int64    // rows handed out
	pending error    // the error that follows the chunk's good rows
	done    bool
	stopped bool
}

// pqGroup is one row group on its way from a decoder to next.
type pqGroup struct {
	index  int
	first  int64 // 1-based number of its first row
	rows   int64 // the rows its metadata promises
	chunks chan *pqChunk
}

// pqChunk is a run of a row group's rows as JSON, back to back.
type pqChunk struct {
	out  []byte
	ends []int // where each row's JSON ends in out
	err  error // what follows the rows and ends the file
}

func newParquetSource(name string, ra io.ReaderAt, size int64, closer io.Closer, stats *Stats, columns func(string) bool) (src source, err error) {
	defer func() {
		if r := recover(); r != nil {
			src, err = nil, fmt.Errorf("%w: %v", ErrNotParquet, r)
		}
	}()
	if err := checkFooter(ra, size); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotParquet, err)
	}
	f, err := parquet.OpenFile(ra, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotParquet, err)
	}
	root, err := buildNode(f.Root(), 0, 0, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotParquet, err)
	}
	stats.Bytes += size
	s := &parquetSource{name: name, file: f, closer: closer, stats: stats, root: root}
	if columns != nil {
		s.project(columns)
	}
	s.start(min(runtime.GOMAXPROCS(0), maxDecoders, max(len(f.RowGroups()), 1)))
	return s, nil
}

// checkFooter rejects a file whose footer claims to be longer than the
// file, before the Parquet library allocates the claimed size.
func checkFooter(ra io.ReaderAt, size int64) error {
	if size < 12 {
		return fmt.Errorf("%d bytes is too short", size)
	}
	var tail [8]byte
	if _, err := ra.ReadAt(tail[:], size-8); err != nil {
		return describeReadError(err)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 {
		return fmt.Errorf("the footer claims %d bytes of a %d-byte file (truncated or not Parquet)", n, size)
	}
	if string(tail[4:]) != "PAR1" {
		return nil // encrypted (PARE) or not Parquet: the library says which
	}
	footer := make([]byte, n)
	if _, err := ra.ReadAt(footer, size-8-n); err != nil {
		return describeReadError(err)
	}
	var md format.FileMetaData
	var protocol thrift.CompactProtocol
	if err := thrift.NewDecoder(protocol.NewReaderFromBytes(footer)).Decode(&md); err != nil {
		return nil // unreadable: the library says why
	}
	if err := checkSchemaDepth(&md); err != nil {
		return err
	}
	return checkPages(ra, size, &md)
}

// The most one page may claim: the line limit's bytes decompressed, and
// values far past any writer's (their defaults hold a megabyte a page).
// The library allocates what a page header claims before it reads it
// (2^31-1 values: 5.6 GB; 2^31-1 bytes: 2.85 GB).
const (
	maxPageBytes  = MaxLine
	maxPageValues = 1 << 26
)

// checkPages reads every page header of every column chunk, before the
// library does, and refuses one whose counts are past the file, its
// column chunk or the bounds above.
func checkPages(ra io.ReaderAt, size int64, md *format.FileMetaData) error {
	var protocol thrift.CompactProtocol
	buf := make([]byte, 1<<20)
	for g, rg := range md.RowGroups {
		for c, cc := range rg.Columns {
			m := &cc.MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			end := start + m.TotalCompressedSize
			where := fmt.Sprintf("row group %d, column %d", g, c)
			if start < 4 || m.TotalCompressedSize < 0 || end > size || end < start {
				return fmt.Errorf("%s claims bytes %d to %d of a %d-byte file", where, start, end, size)
			}
			for pos := start; pos < end; {
				var h format.PageHeader
				var r thrift.BytesReader
				// A header is some tens of bytes, its statistics a few
				// KB: read a little, more only when it does not decode.
				decoded := false
				for _, want := range []int64{4 << 10, 64 << 10, int64(len(buf))} {
					n, err := ra.ReadAt(buf[:min(want, end-pos)], pos)
					if err != nil && err != io.EOF {
						return describeReadError(err)
					}
					h = format.PageHeader{}
					r = protocol.NewReaderFromBytes(buf[:n])
					if thrift.NewDecoder(r).Decode(&h) == nil {
						decoded = true
						break
					}
					if want >= end-pos {
						break
					}
				}
				if !decoded {
					return nil // a header past what is checked here: the library reads it
				}
				values := int64(0)
				switch {
				case h.DataPageHeader.Valid:
					values = int64(h.DataPageHeader.V.NumValues)
				case h.DataPageHeaderV2.Valid:
					values = int64(h.DataPageHeaderV2.V.NumValues)
				case h.DictionaryPageHeader.Valid:
					values = int64(h.DictionaryPageHeader.V.NumValues)
				}
				body := pos + int64(r.BytesRead()) + int64(h.CompressedPageSize)
				switch {
				case h.CompressedPageSize < 0 || h.UncompressedPageSize < 0 || values < 0 || body > end:
					return fmt.Errorf("%s: a page at byte %d claims %d bytes (%d decompressed, %d values) past its column chunk's end at %d", where, pos, h.CompressedPageSize, h.UncompressedPageSize, values, end)
				case int64(h.UncompressedPageSize) > maxPageBytes || values > maxPageValues:
					return fmt.Errorf("%s: a page at byte %d claims %d bytes decompressed and %d values, more than tokenmill reads (%d bytes, %d values)", where, pos, h.UncompressedPageSize, values, maxPageBytes, maxPageValues)
				}
				pos = body
			}
		}
	}
	return nil
}

// maxSchemaDepth is how deeply a Parquet schema may nest groups: every
// layout extract reads needs a handful (Infinity-Instruct's list of
// structs, four); the library builds a deeper one at a cost that grows
// past any machine (100,000 levels: some 80 GB).
const maxSchemaDepth = 64

// checkSchemaDepth reads the footer's schema, a flat list of elements in
// depth-first order, each group with its number of children, and refuses
// one nested deeper than maxSchemaDepth before the library builds it.
func checkSchemaDepth(md *format.FileMetaData) error {
	var open []int32 // children still to come of each group on the path
	for _, e := range md.Schema {
		for len(open) > 0 && open[len(open)-1] == 0 {
			open = open[:len(open)-1]
		}
		if len(open) > 0 {
			open[len(open)-1]--
		}
		if e.NumChildren.Valid && e.NumChildren.V > 0 {
			if len(open) >= maxSchemaDepth {
				return fmt.Errorf("its schema nests groups more than %d deep (at %q): no layout needs that, and reading it would take memory without bound", maxSchemaDepth, e.Name)
			}
			open = append(open, e.NumChildren.V)
		}
	}
	return nil
}

// start starts the decoders and the goroutine that deals row groups out to
// them, at most n ahead of the one being handed out.
func (s *parquetSource) start(n int) {
	s.order = make(chan *pqGroup, n)
	s.ahead = make(chan struct{}, n)
	s.stop = make(chan struct{})
	// Each row group not yet handed out holds at most groupChunks chunks
	// and the one its decoder fills; next holds one more.
	chunks := n*(groupChunks+1) + 1
	s.free = make(chan *pqChunk, chunks)
	for range chunks {
		s.free <- &pqChunk{}
	}
	jobs := make(chan *pqGroup, n)
	s.wg.Go(func() {
		defer close(jobs)
		defer close(s.order)
		var first int64 = 1
		for i, g := range s.file.RowGroups() {
			select {
			case s.ahead <- struct{}{}:
			case <-s.stop:
				return
			}
			job := &pqGroup{index: i, first: first, rows: g.NumRows(), chunks: make(chan *pqChunk, groupChunks)}
			first += job.rows
			s.order <- job // never blocks: ahead holds as many
			jobs <- job
		}
	})
	for range n {
		s.wg.Go(func() {
			d := &pqDecoder{s: s, cols: make([]pqColumn, len(s.file.Schema().Columns()))}
			d.w.cols = make([][]parquet.Value, len(d.cols))
			d.w.pos = make([]int, len(d.cols))
			for g := range jobs {
				d.group(g)
			}
		})
	}
}

func (s *parquetSource) next() (RawLine, error) {
	for s.chunk == nil || s.handed >= len(s.chunk.ends) {
		switch {
		case s.pending != nil:
			err := s.pending
			s.pending, s.done = nil, true
			return RawLine{}, err
		case s.done:
			return RawLine{}, io.EOF
		}
		s.nextChunk()
	}
	start := 0
	if s.handed > 0 {
		start = s.chunk.ends[s.handed-1]
	}
	data := s.chunk.out[start:s.chunk.ends[s.handed]]
	s.handed++
	s.row++
	return RawLine{Data: data, File: s.name, Line: s.row, Built: true}, nil
}

// nextChunk takes the next chunk of rows in file order, or sets pending
// (or done) at the end: a problem (a read error, a corrupt row) ends the
// file, but the rows decoded before it are handed out first.
func (s *parquetSource) nextChunk() {
	if s.chunk != nil {
		s.free <- s.chunk
		s.chunk, s.handed = nil, 0
	}
	for s.chunk == nil {
		if s.cur == nil {
			g, ok := <-s.order
			if !ok {
				if s.row < s.file.NumRows() {
					s.pending = s.errorf(s.row+1, "file promises %d rows but its row groups hold %d", s.file.NumRows(), s.row)
				} else {
					s.done = true
				}
				return
			}
			s.cur = g
		}
		c, ok := <-s.cur.chunks
		if !ok {
			s.cur = nil
			<-s.ahead
			continue
		}
		s.chunk = c
		if c.err != nil {
			s.pending = c.err
		}
	}
}

// pqDecoder decodes whole row groups, one at a time, into chunks.
type pqDecoder struct {
	s     *parquetSource
	cols  []pqColumn // by leaf column index; only the leaves read are open
	w     rowWriter
	chunk *pqChunk
	g     *pqGroup
	done  int64 // rows of g decoded
}

// pqColumn reads one column chunk's values page by page. A page is
// released (its buffers go back to the library's pools) once the row that
// used its last value is written: the values point into it.
type pqColumn struct {
	pages   parquet.Pages
	values  parquet.ValueReader // of the current page; nil between pages
	page    parquet.Page
	retired []parquet.Page // pages read to the end, held for the row
	buf     []parquet.Value
	at, n   int // buf[at:n] are read and not yet used
	row     []parquet.Value
	eof     bool
}

// group decodes g into its chunks and closes them; after an error, only
// the chunk that carries it.
func (d *pqDecoder) group(g *pqGroup) {
	defer close(g.chunks)
	d.g, d.done = g, 0
	if !d.take() {
		return
	}
	chunks := d.s.file.RowGroups()[g.index].ColumnChunks()
	open := func(c int) {
		col := &d.cols[c]
		// Pages are read and decompressed ahead, by a goroutine per
		// column, while rows are assembled.
		col.pages, col.eof, col.at, col.n = parquet.AsyncPages(chunks[c].Pages()), false, 0, 0
	}
	if d.s.leaves == nil {
		for c := range d.cols {
			open(c)
		}
	} else {
		for _, c := range d.s.leaves {
			open(c)
		}
	}
	defer d.closeColumns()
	for d.done < g.rows {
		if !d.decode() {
			break
		}
		if len(d.chunk.out) >= chunkBytes || len(d.chunk.ends) >= chunkRows {
			if !d.send() || !d.take() {
				return
			}
		}
	}
	if len(d.chunk.ends) > 0 || d.chunk.err != nil {
		d.send()
		return
	}
	d.s.free <- d.chunk // never blocks: the chunk came from free
	d.chunk = nil
}

func (d *pqDecoder) closeColumns() {
	for c := range d.cols {
		col := &d.cols[c]
		if col.pages == nil {
			continue
		}
		col.release()
		if col.page != nil {
			parquet.Release(col.page)
		}
		col.pages.Close()
		col.pages, col.page, col.values = nil, nil, nil
		clear(col.buf)
		clear(col.row)
	}
}

// take gets an empty chunk, false when the source is closed.
func (d *pqDecoder) take() bool {
	select {
	case d.chunk = <-d.s.free:
		d.chunk.out, d.chunk.ends, d.chunk.err = d.chunk.out[:0], d.chunk.ends[:0], nil
		return true
	case <-d.s.stop:
		return false
	}
}

// send hands the chunk on, false when the source is closed.
func (d *pqDecoder) send() bool {
	select {
	case d.g.chunks <- d.chunk:
		d.chunk = nil
		return true
	case <-d.s.stop:
		return false
	}
}

// decode appends up to parquetBatch rows to the chunk, false once it
// holds the error that ends the file.
func (d *pqDecoder) decode() (ok bool) {
	c := d.chunk
	defer func() {
		if r := recover(); r != nil {
			c.err, ok = d.errorf("corrupt row data: %v", r), false
		}
	}()
	for range min(int64(parquetBatch), d.g.rows-d.done) {
		clear(d.w.cols)
		for i := range d.cols {
			col := &d.cols[i]
			if col.pages == nil {
				continue
			}
			switch err := col.readRow(); {
			case err == io.EOF:
				c.err = d.errorf("row group %d ends %d rows early", d.g.index+1, d.g.rows-d.done)
				return false
			case err != nil:
				c.err = d.errorf("%v", describeReadError(err))
				return false
			}
			d.w.cols[i] = col.row
		}
		start := len(c.out)
		d.w.out = c.out // the row is written in place
		err := d.w.writeCols(d.s.root)
		c.out = d.w.out
		for i := range d.cols {
			d.cols[i].release()
		}
		if err != nil {
			c.out = c.out[:start]
			c.err = d.errorf("%v", err)
			return false
		}
		c.ends = append(c.ends, len(c.out))
		d.done++
	}
	return true
}

// readRow sets row to the values of the column's next row: a value of
// repetition level 0 and those after it of higher levels. io.EOF: the
// column has no more rows.
func (col *pqColumn) readRow() error {
	col.row = col.row[:0]
	for {
		if col.at == col.n {
			if err := col.fill(); err == io.EOF && len(col.row) > 0 {
				return nil
			} else if err != nil {
				return err
			}
		}
		v := col.buf[col.at]
		if v.RepetitionLevel() == 0 && len(col.row) > 0 {
			return nil
		}
		col.row = append(col.row, v)
		col.at++
	}
}

// fill reads the next values, from the next page when the current one is
// used up (it is retired then: the row being read may hold its last values).
func (col *pqColumn) fill() error {
	if col.buf == nil {
		col.buf = make([]parquet.Value, 1024)
	}
	col.at, col.n = 0, 0
	for col.n == 0 {
		if col.eof {
			return io.EOF
		}
		if col.values == nil {
			if col.page != nil {
				col.retired = append(col.retired, col.page)
				col.page = nil
			}
			p, err := col.pages.ReadPage()
			if err == io.EOF {
				col.eof = true
				return io.EOF
			}
			if err != nil {
				return err
			}
			col.page, col.values = p, p.Values()
		}
		n, err := col.values.ReadValues(col.buf)
		col.n = n
		switch {
		case err == io.EOF:
			col.values = nil // the page is used up once buf is
		case err != nil:
			return err
		}
	}
	return nil
}

// release gives back the pages whose values the row written last used.
func (col *pqColumn) release() {
	for i, p := range col.retired {
		parquet.Release(p)
		col.retired[i] = nil
	}
	col.retired = col.retired[:0]
}

// errorf is an error at the first row of the group not yet decoded.
func (d *pqDecoder) errorf(format string, args ...any) error {
	return d.s.errorf(d.g.first+d.done, format, args...)
}

// project keeps the top-level fields columns names (at least one, so
// that rows are still counted by a column's values).
func (s *parquetSource) project(columns func(string) bool) {
	var kept []*pqNode
	for _, f := range s.root.fields {
		if columns(string(f.name)) {
			kept = append(kept, f)
		}
	}
	if len(kept) == len(s.root.fields) {
		return
	}
	if len(kept) == 0 {
		kept = s.root.fields[:1]
	}
	root := *s.root
	root.fields = kept
	s.root = &root
	s.leaves = []int{}
	for _, f := range kept {
		for c := f.first; c < f.end; c++ {
			s.leaves = append(s.leaves, c)
		}
	}
}

func (s *parquetSource) errorf(row int64, format string, args ...any) error {
	return &InputError{File: s.name, Line: row, Reason: ReasonUnreadable, Err: fmt.Errorf(format, args...)}
}

func (s *parquetSource) close() error {
	if !s.stopped {
		s.stopped = true
		close(s.stop)
		s.wg.Wait() // no decoder reads the file once it is closed
	}
	return s.closer.Close()
}

// pqKind is how a schema node is written as JSON.
type pqKind int

const (
	pqLeaf   pqKind = iota
	pqStruct        // a group: an object of its fields
	pqList          // a LIST group: an array of its elements
	pqMap           // a MAP group: an object of its key/value pairs
)

// pqNode is one node of the schema with the levels that tell, for any
// position in a row, whether the node is there.
type pqNode struct {
	name     []byte
	key      []byte // "name": ready to write
	kind     pqKind
	optional bool
	repeated bool
	def      int // definition level at which the node is present
	rep      int // repetition level of a new element of this node
	first    int // first leaf column under the node
	end      int // one past the last leaf column under the node
	leaf     func(dst []byte, v parquet.Value) []byte
	fields   []*pqNode
	// item is what a pqList writes per repetition of fields[0]: fields[0]
	// itself (two-level lists) or its single child (three-level lists).
	item *pqNode
}

func buildNode(c *parquet.Column, def, rep int, root bool) (*pqNode, error) {
	n := &pqNode{name: []byte(c.Name()), key: append(json.AppendEscape(nil, c.Name(), 0), ':'),
		optional: !root && c.Optional(), repeated: !root && c.Repeated()}
	if n.optional || n.repeated {
		def++
	}
	if n.repeated {
		rep++
	}
	n.def, n.rep = def, rep
	if c.Leaf() {
		if c.MaxDefinitionLevel() != def || c.MaxRepetitionLevel() != rep {
			return nil, fmt.Errorf("column %s: levels do not match its schema", c.Name())
		}
		n.kind, n.first, n.end, n.leaf = pqLeaf, c.Index(), c.Index()+1, leafWriter(c.Type())
		return n, nil
	}
	n.kind = pqStruct
	for _, child := range c.Columns() {
		f, err := buildNode(child, def, rep, false)
		if err != nil {
			return nil, err
		}
		n.fields = append(n.fields, f)
	}
	if len(n.fields) == 0 {
		return nil, fmt.Errorf("group %s has no columns", c.Name())
	}
	n.first, n.end = n.fields[0].first, n.fields[len(n.fields)-1].end
	if lt := c.Type().LogicalType(); lt != nil && len(n.fields) == 1 && n.fields[0].repeated {
		r := n.fields[0]
		switch lt.Value.(type) {
		case *format.ListType:
			n.kind, n.item = pqList, r
			// The Parquet backward-compatibility rules: a repeated group
			// with one field is the three-level list's wrapper unless it
			// is named "array" or "<list>_tuple".
			if r.kind != pqLeaf && len(r.fields) == 1 && c.Columns()[0].Name() != "array" && c.Columns()[0].Name() != c.Name()+"_tuple" {
				n.item = r.fields[0]
			}
		case *format.MapType:
			if r.kind == pqStruct && len(r.fields) <= 2 {
				n.kind = pqMap
			}
		}
	}
	return n, nil
}

// rowWriter assembles one row's JSON from its column values (Dremel record
// assembly): a node is present at a position when the definition level of
// the next value of its first leaf reaches the node's; a repeated node goes
// on while that value's repetition level equals the node's.
type rowWriter struct {
	cols [][]parquet.Value
	pos  []int
	out  []byte
	err  error
}

// writeCols appends the row whose values are in cols to out.
func (w *rowWriter) writeCols(root *pqNode) error {
	clear(w.pos)
	w.err = nil
	w.value(root)
	if w.err == nil {
		for i := range w.cols {
			if w.pos[i] != len(w.cols[i]) {
				return fmt.Errorf("column %d has %d values for the row, %d were used", i, len(w.cols[i]), w.pos[i])
			}
		}
	}
	return w.err
}

var errLevels = errors.New("column values do not fit the schema's levels")

// peek returns the next value of column c; past the end it fails the row
// and returns a value that ends every loop.
func (w *rowWriter) peek(c int) parquet.Value {
	if w.pos[c] >= len(w.cols[c]) {
		if w.err == nil {
			w.err = errLevels
		}
		return parquet.Value{}
	}
	return w.cols[c][w.pos[c]]
}

func (w *rowWriter) present(n *pqNode) bool {
	return w.err == nil && w.peek(n.first).DefinitionLevel() >= n.def
}

// skip consumes the one value each leaf under n has where n is absent.
func (w *rowWriter) skip(n *pqNode) {
	for c := n.first; c < n.end; c++ {
		w.peek(c)
		w.pos[c]++
	}
}

// field writes n with its own repetition: an array if repeated, null if
// optional and absent, else its value.
func (w *rowWriter) field(n *pqNode) {
	switch {
	case n.repeated:
		w.each(n, '[', ']', func() { w.value(n) })
	case n.optional && !w.present(n):
		w.skip(n)
		w.out = append(w.out, "null"...)
	default:
		w.value(n)
	}
}

// each writes the elements of repeated node r between open and close.
func (w *rowWriter) each(r *pqNode, open, close byte, item func()) {
	w.out = append(w.out, open)
	if !w.present(r) {
		w.skip(r)
		w.out = append(w.out, close)
		return
	}
	for i := 0; w.err == nil; i++ {
		if i > 0 {
			w.out = append(w.out, ',')
		}
		item()
		if w.pos[r.first] >= len(w.cols[r.first]) || w.cols[r.first][w.pos[r.first]].RepetitionLevel() != r.rep {
			break
		}
	}
	w.out = append(w.out, close)
}

// value writes a node that is present.
func (w *rowWriter) value(n *pqNode) {
	switch n.kind {
	case pqLeaf:
		v := w.peek(n.first)
		w.pos[n.first]++
		if v.IsNull() {
			w.out = append(w.out, "null"...)
		} else {
			w.out = n.leaf(w.out, v)
		}
	case pqStruct:
		w.out = append(w.out, '{')
		for i, f := range n.fields {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			w.out = append(w.out, f.key...)
			w.field(f)
		}
		w.out = append(w.out, '}')
	case pqList:
		r := n.fields[0]
		w.each(r, '[', ']', func() {
			if n.item == r {
				w.value(r)
			} else {
				w.field(n.item)
			}
		})
	case pqMap:
		r := n.fields[0]
		w.each(r, '{', '}', func() {
			start := len(w.out)
			w.field(r.fields[0])
			if len(w.out) > start && w.out[start] != '"' { // a non-string key
				key := string(w.out[start:])
				w.out = json.AppendEscape(w.out[:start], key, 0)
			}
			w.out = append(w.out, ':')
			if len(r.fields) == 2 {
				w.field(r.fields[1])
			} else {
				w.out = append(w.out, "null"...)
			}
		})
	}
}

// leafWriter picks how a column's values are written: by logical type
// (strings, dates and timestamps as text, decimals as exact numbers,
// unsigned integers unsigned), else by physical type. Text that is not
// valid UTF-8 and raw binary become base64 strings; NaN and infinities,
// which JSON cannot hold, become null.
func leafWriter(t parquet.Type) func([]byte, parquet.Value) []byte {
	if lt := t.LogicalType(); lt != nil {
		switch l := lt.Value.(type) {
		case *format.StringType, *format.EnumType, *format.JsonType:
			return appendString
		case *format.UUIDType:
			return appendUUID
		case *format.DecimalType:
			scale := int(l.Scale)
			return func(dst []byte, v parquet.Value) []byte { return appendDecimal(dst, v, scale) }
		case *format.DateType:
			return func(dst []byte, v parquet.Value) []byte {
				return appendTime(dst, time.Unix(int64(v.Int32())*86400, 0), "2006-01-02")
			}
		case *format.TimestampType:
			unit := time.Millisecond
			switch l.Unit.Value.(type) {
			case *format.MicroSeconds:
				unit = time.Microsecond
			case *format.NanoSeconds:
				unit = time.Nanosecond
			}
			return func(dst []byte, v parquet.Value) []byte {
				ns := v.Int64() * int64(unit)
				return appendTime(dst, time.Unix(ns/1e9, ns%1e9), time.RFC3339Nano)
			}
		case *format.IntType:
			if !l.IsSigned {
				return func(dst []byte, v parquet.Value) []byte {
					if v.Kind() == parquet.Int64 {
						return strconv.AppendUint(dst, v.Uint64(), 10)
					}
					return strconv.AppendUint(dst, uint64(v.Uint32()), 10)
				}
			}
		case *format.Float16Type:
			return func(dst []byte, v parquet.Value) []byte {
				b := v.ByteArray()
				if len(b) != 2 {
					return append(dst, "null"...)
				}
				return appendFloat(dst, float64(float16(binary.LittleEndian.Uint16(b))), 32)
			}
		case *format.NullType:
			return func(dst []byte, _ parquet.Value) []byte { return append(dst, "null"...) }
		}
	}
	switch t.Kind() {
	case parquet.Boolean:
		return func(dst []byte, v parquet.Value) []byte { return strconv.AppendBool(dst, v.Boolean()) }
	case parquet.Int32:
		return func(dst []byte, v parquet.Value) []byte { return strconv.AppendInt(dst, int64(v.Int32()), 10) }
	case parquet.Int64:
		return func(dst []byte, v parquet.Value) []byte { return strconv.AppendInt(dst, v.Int64(), 10) }
	case parquet.Int96:
		// The legacy Impala/Spark timestamp: nanoseconds of the day, then
		// the Julian day number.
		return func(dst []byte, v parquet.Value) []byte {
			i := v.Int96()
			ns := int64(uint64(i[1])<<32 | uint64(i[0]))
			days := int64(i[2]) - 2440588
			return appendTime(dst, time.Unix(days*86400, ns), time.RFC3339Nano)
		}
	case parquet.Float:
		return func(dst []byte, v parquet.Value) []byte { return appendFloat(dst, float64(v.Float()), 32) }
	case parquet.Double:
		return func(dst []byte, v parquet.Value) []byte { return appendFloat(dst, v.Double(), 64) }
	case parquet.ByteArray:
		return appendBytes
	}
	return appendBase64
}

// appendString writes a text column's value as a JSON string (invalid
// UTF-8 becomes U+FFFD).
func appendString(dst []byte, v parquet.Value) []byte {
	return appendEscaped(dst, v.ByteArray())
}

// appendBytes writes an unannotated binary value as text when it is
// UTF-8, which is how most writers store strings, else as base64.
func appendBytes(dst []byte, v parquet.Value) []byte {
	if !utf8.Valid(v.ByteArray()) {
		return appendBase64(dst, v)
	}
	return appendString(dst, v)
}

func appendBase64(dst []byte, v parquet.Value) []byte {
	b := v.ByteArray()
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

func appendUUID(dst []byte, v parquet.Value) []byte {
	b := v.ByteArray()
	if len(b) != 16 {
		return appendBase64(dst, v)
	}
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hex[c>>4], hex[c&0xf])
	}
	return append(dst, '"')
}

func appendTime(dst []byte, t time.Time, layout string) []byte {
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, layout)
	return append(dst, '"')
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// appendDecimal writes the exact decimal number: the unscaled integer (an
// int32, int64, or big-endian two's complement bytes) over 10^scale.
func appendDecimal(dst []byte, v parquet.Value, scale int) []byte {
	var digits string
	switch v.Kind() {
	case parquet.Int32:
		digits = strconv.FormatInt(int64(v.Int32()), 10)
	case parquet.Int64:
		digits = strconv.FormatInt(v.Int64(), 10)
	default:
		b := v.ByteArray()
		n := new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
		}
		digits = n.String()
	}
	neg := digits[0] == '-'
	if neg {
		dst = append(dst, '-')
		digits = digits[1:]
	}
	if scale <= 0 {
		dst = append(dst, digits...)
		for range -scale {
			dst = append(dst, '0')
		}
		return dst
	}
	for len(digits) <= scale {
		digits = "0" + digits
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	return append(dst, digits[len(digits)-scale:]...)
}

// float16 widens an IEEE 754 half-precision number.
func float16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch exp {
	case 0:
		f := float32(frac) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	case 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}
