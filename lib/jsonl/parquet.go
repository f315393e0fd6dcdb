package jsonl

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/segmentio/encoding/json"
)

// parquetBatch is how many rows are decoded at a time.
const parquetBatch = 64

// parquetSource yields each row of a Parquet file as one JSON object, its
// fields in schema order. Nested columns become JSON the way a dataset
// author means them: LIST-annotated groups (Hugging Face's
// list<struct<from, value>> conversations) are arrays, MAP groups objects,
// other groups objects, null is null. With a column filter, only the
// top-level fields it names are read and written. Rows are assembled straight from the
// column values and their repetition and definition levels, without
// reflection or maps; row groups are read one after another, so memory
// stays bounded by one row group's pages. Line is the 1-based row number.
type parquetSource struct {
	name   string
	file   *parquet.File
	closer io.Closer
	stats  *Stats

	root    *pqNode
	leaves  []int         // the leaf columns read, nil for all
	group   int           // index of the next row group
	rows    parquet.Rows  // the current row group's rows
	left    int64         // rows the current row group still promises
	batch   []parquet.Row // decoded rows
	out     []byte        // the batch's rows as JSON, back to back
	ends    []int         // where each row's JSON ends in out
	handed  int           // rows of the batch handed out
	row     int64         // rows handed out
	w       rowWriter
	pending error // the error that follows the batch's good rows
	done    bool
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
	s := &parquetSource{name: name, file: f, closer: closer, stats: stats, root: root,
		batch: make([]parquet.Row, parquetBatch)}
	if columns != nil {
		s.project(columns)
	}
	s.w.cols = make([][]parquet.Value, len(f.Schema().Columns()))
	s.w.pos = make([]int, len(s.w.cols))
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
	if n := int64(binary.LittleEndian.Uint32(tail[:4])); n > size-12 {
		return fmt.Errorf("the footer claims %d bytes of a %d-byte file (truncated or not Parquet)", n, size)
	}
	return nil
}

func (s *parquetSource) next() (RawLine, error) {
	for s.handed >= len(s.ends) {
		switch {
		case s.pending != nil:
			err := s.pending
			s.pending, s.done = nil, true
			return RawLine{}, err
		case s.done:
			return RawLine{}, io.EOF
		}
		if err := s.fill(); err != nil {
			return RawLine{}, err
		}
	}
	start := 0
	if s.handed > 0 {
		start = s.ends[s.handed-1]
	}
	data := s.out[start:s.ends[s.handed]]
	s.handed++
	s.row++
	return RawLine{Data: data, File: s.name, Line: s.row, Built: true}, nil
}

// fill decodes the next batch of rows into JSON. A problem (a read error,
// a corrupt row) ends the file, but the rows decoded before it are handed
// out first.
func (s *parquetSource) fill() error {
	s.out, s.ends, s.handed = s.out[:0], s.ends[:0], 0
	for s.left == 0 {
		if s.rows != nil {
			s.rows.Close()
			s.rows = nil
		}
		groups := s.file.RowGroups()
		if s.group >= len(groups) {
			if s.row < s.file.NumRows() {
				return s.errorf(s.row+1, "file promises %d rows but its row groups hold %d", s.file.NumRows(), s.row)
			}
			return io.EOF
		}
		// Pages are read and decompressed ahead, by a goroutine per
		// column, while rows are assembled.
		g := parquet.AsyncRowGroup(groups[s.group])
		s.group++
		if s.leaves != nil {
			g = projected{g, s.leaves}
		}
		s.rows, s.left = parquet.NewRowGroupRowReader(g), g.NumRows()
	}
	s.decode()
	return nil
}

func (s *parquetSource) decode() {
	defer func() {
		if r := recover(); r != nil {
			s.pending = s.errorf(s.nextRow(), "corrupt row data: %v", r)
		}
	}()
	n, err := s.rows.ReadRows(s.batch[:min(int64(len(s.batch)), s.left)])
	s.left -= int64(n)
	for i := 0; i < n; i++ {
		if werr := s.w.writeRow(s.root, s.batch[i]); werr != nil {
			s.pending = s.errorf(s.nextRow(), "%v", werr)
			return
		}
		s.out = append(s.out, s.w.out...)
		s.ends = append(s.ends, len(s.out))
	}
	switch {
	case n == 0 && err == nil:
		s.pending = s.errorf(s.nextRow(), "row group %d yields no rows but promises %d more", s.group, s.left)
	case err == nil || (err == io.EOF && s.left == 0):
	case err == io.EOF:
		s.pending = s.errorf(s.nextRow(), "row group %d ends %d rows early", s.group, s.left)
	default:
		s.pending = s.errorf(s.nextRow(), "%v", describeReadError(err))
	}
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

// projected is a row group of some of its leaf columns, whose values keep
// their column indexes.
type projected struct {
	parquet.RowGroup
	leaves []int
}

func (p projected) ColumnChunks() []parquet.ColumnChunk {
	all := p.RowGroup.ColumnChunks()
	chunks := make([]parquet.ColumnChunk, len(p.leaves))
	for i, c := range p.leaves {
		chunks[i] = all[c]
	}
	return chunks
}

// nextRow is the 1-based number of the first row not yet decoded.
func (s *parquetSource) nextRow() int64 { return s.row + int64(len(s.ends)) + 1 }

func (s *parquetSource) errorf(row int64, format string, args ...any) error {
	return &InputError{File: s.name, Line: row, Reason: ReasonUnreadable, Err: fmt.Errorf(format, args...)}
}

func (s *parquetSource) close() error {
	if s.rows != nil {
		s.rows.Close()
		s.rows = nil
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

func (w *rowWriter) writeRow(root *pqNode, row parquet.Row) error {
	clear(w.cols)
	// A row holds each column's values in a run, in column order; with
	// some columns left out, the runs are told apart by their index.
	for i := 0; i < len(row); {
		c, j := row[i].Column(), i+1
		for j < len(row) && row[j].Column() == c {
			j++
		}
		if c >= 0 && c < len(w.cols) {
			w.cols[c] = row[i:j:j]
		}
		i = j
	}
	clear(w.pos)
	w.out, w.err = w.out[:0], nil
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
