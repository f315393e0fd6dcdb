package merge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"

	"github.com/klauspost/compress/zstd"
)

// A Parquet reader written apart from the writer's library, for the round
// trip of --to tokens: it reads the file's footer (Thrift's compact
// protocol), each column chunk's pages (data pages v1 and v2, plain or
// dictionary values, zstd or no compression), and the repetition and
// definition levels (the RLE/bit-packed hybrid), from the format's
// specification (apache/parquet-format: Encodings.md, the Thrift
// definitions in parquet.thrift), not from the writer's code.

// thrift compact types.
const (
	tBoolTrue  = 1
	tBoolFalse = 2
	tByte      = 3
	tI16       = 4
	tI32       = 5
	tI64       = 6
	tDouble    = 7
	tBinary    = 8
	tList      = 9
	tSet       = 10
	tMap       = 11
	tStruct    = 12
)

// tstruct is a decoded Thrift struct: field id to value (int64, bool,
// []byte, []any of values, tstruct).
type tstruct map[int16]any

type thriftReader struct {
	b   []byte
	pos int
}

func (r *thriftReader) byte1() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, errors.New("thrift: unexpected end")
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *thriftReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		return 0, errors.New("thrift: bad varint")
	}
	r.pos += n
	return v, nil
}

func (r *thriftReader) zigzag() (int64, error) {
	u, err := r.uvarint()
	return int64(u>>1) ^ -int64(u&1), err
}

func (r *thriftReader) value(typ byte) (any, error) {
	switch typ {
	case tBoolTrue:
		return true, nil
	case tBoolFalse:
		return false, nil
	case tByte:
		c, err := r.byte1()
		return int64(int8(c)), err
	case tI16, tI32, tI64:
		return r.zigzag()
	case tDouble:
		if r.pos+8 > len(r.b) {
			return nil, errors.New("thrift: short double")
		}
		r.pos += 8
		return nil, nil
	case tBinary:
		n, err := r.uvarint()
		if err != nil || r.pos+int(n) > len(r.b) {
			return nil, errors.New("thrift: bad binary")
		}
		v := r.b[r.pos : r.pos+int(n)]
		r.pos += int(n)
		return v, nil
	case tList, tSet:
		h, err := r.byte1()
		if err != nil {
			return nil, err
		}
		size, et := uint64(h>>4), h&0x0f
		if size == 15 {
			if size, err = r.uvarint(); err != nil {
				return nil, err
			}
		}
		out := make([]any, 0, size)
		for i := uint64(0); i < size; i++ {
			var v any
			if et == tBoolTrue || et == tBoolFalse {
				c, err := r.byte1()
				if err != nil {
					return nil, err
				}
				v = c == 1
			} else if v, err = r.value(et); err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case tMap:
		n, err := r.uvarint()
		if err != nil || n == 0 {
			return nil, err
		}
		kv, err := r.byte1()
		if err != nil {
			return nil, err
		}
		for i := uint64(0); i < n; i++ {
			if _, err := r.value(kv >> 4); err != nil {
				return nil, err
			}
			if _, err := r.value(kv & 0x0f); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case tStruct:
		return r.strct()
	}
	return nil, fmt.Errorf("thrift: type %d", typ)
}

func (r *thriftReader) strct() (tstruct, error) {
	s := tstruct{}
	var last int16
	for {
		h, err := r.byte1()
		if err != nil {
			return nil, err
		}
		if h == 0 {
			return s, nil
		}
		typ := h & 0x0f
		id := last + int16(h>>4)
		if h>>4 == 0 {
			v, err := r.zigzag()
			if err != nil {
				return nil, err
			}
			id = int16(v)
		}
		last = id
		v, err := r.value(typ)
		if err != nil {
			return nil, err
		}
		s[id] = v
	}
}

func (s tstruct) i(id int16) int64 {
	v, _ := s[id].(int64)
	return v
}

func (s tstruct) has(id int16) bool { _, ok := s[id]; return ok }

func (s tstruct) sub(id int16) tstruct {
	v, _ := s[id].(tstruct)
	return v
}

func (s tstruct) list(id int16) []any {
	v, _ := s[id].([]any)
	return v
}

// pqLeaf is a column: its path, type and the most levels its values have.
type pqLeaf struct {
	path           string
	typ            int64 // 1 INT32, 2 INT64, 6 BYTE_ARRAY
	maxDef, maxRep int
}

// pqColumn is a column's values with their levels, as read.
type pqColumn struct {
	leaf     pqLeaf
	rep, def []int
	values   []any // int64 or string, one per def == maxDef
}

// readParquetColumns reads every column of a file whose row groups hold
// the leaves it finds, keyed by the leaf's dotted path.
func readParquetColumns(path string) (map[string]*pqColumn, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	if len(b) < 12 || string(b[:4]) != "PAR1" || string(b[len(b)-4:]) != "PAR1" {
		return nil, 0, errors.New("not a Parquet file")
	}
	n := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
	footer := &thriftReader{b: b[len(b)-8-n : len(b)-8]}
	meta, err := footer.strct()
	if err != nil {
		return nil, 0, err
	}
	leaves := map[string]pqLeaf{}
	schema := meta.list(2)
	var walk func(i int, prefix string, def, rep int) int
	walk = func(i int, prefix string, def, rep int) int {
		el := schema[i].(tstruct)
		name := string(el[4].([]byte))
		if el.has(3) {
			switch el.i(3) {
			case 1:
				def++
			case 2:
				def, rep = def+1, rep+1
			}
		}
		if prefix != "" {
			name = prefix + "." + name
		}
		children := int(el.i(5))
		if children == 0 {
			leaves[name] = pqLeaf{path: name, typ: el.i(1), maxDef: def, maxRep: rep}
			return i + 1
		}
		j := i + 1
		for c := 0; c < children; c++ {
			j = walk(j, name, def, rep)
		}
		return j
	}
	root := schema[0].(tstruct)
	for j, c := 1, 0; c < int(root.i(5)); c++ {
		j = walk(j, "", 0, 0)
	}
	cols := map[string]*pqColumn{}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	for _, rg := range meta.list(4) {
		for _, cc := range rg.(tstruct).list(1) {
			md := cc.(tstruct).sub(3)
			var parts [][]byte
			for _, p := range md.list(3) {
				parts = append(parts, p.([]byte))
			}
			name := string(bytes.Join(parts, []byte(".")))
			leaf, ok := leaves[name]
			if !ok {
				return nil, 0, fmt.Errorf("column %s not in the schema", name)
			}
			col := cols[name]
			if col == nil {
				col = &pqColumn{leaf: leaf}
				cols[name] = col
			}
			if err := readChunk(b, md, col, dec); err != nil {
				return nil, 0, fmt.Errorf("column %s: %w", name, err)
			}
		}
	}
	return cols, meta.i(3), nil
}

func readChunk(file []byte, md tstruct, col *pqColumn, dec *zstd.Decoder) error {
	codec := md.i(4)
	off := md.i(9)
	if md.has(11) && md.i(11) > 0 && md.i(11) < off {
		off = md.i(11)
	}
	want := md.i(5)
	var dict []any
	var got int64
	for got < want {
		r := &thriftReader{b: file, pos: int(off)}
		ph, err := r.strct()
		if err != nil {
			return err
		}
		size := int(ph.i(3))
		page := file[r.pos : r.pos+size]
		off = int64(r.pos + size)
		uncompress := func(p []byte) ([]byte, error) {
			switch codec {
			case 0:
				return p, nil
			case 6:
				return dec.DecodeAll(p, nil)
			}
			return nil, fmt.Errorf("codec %d", codec)
		}
		switch ph.i(1) {
		case 2: // dictionary page
			data, err := uncompress(page)
			if err != nil {
				return err
			}
			dict, _, err = plainValues(data, col.leaf.typ, int(ph.sub(7).i(1)))
			if err != nil {
				return err
			}
		case 0: // data page v1: levels, then values, all compressed
			h := ph.sub(5)
			data, err := uncompress(page)
			if err != nil {
				return err
			}
			nv := int(h.i(1))
			rep, data, err := v1Levels(data, col.leaf.maxRep, nv)
			if err != nil {
				return err
			}
			def, data, err := v1Levels(data, col.leaf.maxDef, nv)
			if err != nil {
				return err
			}
			if err := col.add(rep, def, data, h.i(2), dict); err != nil {
				return err
			}
			got += int64(nv)
		case 3: // data page v2: levels uncompressed before the values
			h := ph.sub(8)
			nv := int(h.i(1))
			rl, dl := int(h.i(6)), int(h.i(5))
			rep, err := hybrid(page[:rl], bitWidth(col.leaf.maxRep), nv)
			if err != nil {
				return err
			}
			def, err := hybrid(page[rl:rl+dl], bitWidth(col.leaf.maxDef), nv)
			if err != nil {
				return err
			}
			data := page[rl+dl:]
			if v, ok := h[7].(bool); !ok || v {
				if data, err = uncompress(data); err != nil {
					return err
				}
			}
			if err := col.add(rep, def, data, h.i(4), dict); err != nil {
				return err
			}
			got += int64(nv)
		default:
			return fmt.Errorf("page type %d", ph.i(1))
		}
	}
	return nil
}

func (c *pqColumn) add(rep, def []int, data []byte, encoding int64, dict []any) error {
	present := 0
	for _, d := range def {
		if d == c.leaf.maxDef {
			present++
		}
	}
	var vals []any
	var err error
	switch encoding {
	case 0:
		vals, _, err = plainValues(data, c.leaf.typ, present)
	case 5: // DELTA_BINARY_PACKED
		var ints []int64
		if ints, _, err = deltaBinaryPacked(data); err == nil {
			for _, v := range ints[:min(present, len(ints))] {
				vals = append(vals, v)
			}
		}
	case 6: // DELTA_LENGTH_BYTE_ARRAY: the lengths delta-packed, then the bytes
		var lens []int64
		var rest []byte
		if lens, rest, err = deltaBinaryPacked(data); err == nil {
			for _, l := range lens[:min(present, len(lens))] {
				if int(l) > len(rest) {
					return errors.New("byte array past the page")
				}
				vals = append(vals, string(rest[:l]))
				rest = rest[l:]
			}
		}
	case 2, 8:
		if len(data) == 0 {
			break
		}
		var idx []int
		if idx, err = hybrid(data[1:], int(data[0]), present); err == nil {
			for _, i := range idx {
				if i >= len(dict) {
					return errors.New("dictionary index out of range")
				}
				vals = append(vals, dict[i])
			}
		}
	default:
		return fmt.Errorf("encoding %d", encoding)
	}
	if err != nil {
		return err
	}
	if rep == nil {
		rep = make([]int, len(def))
	}
	c.rep, c.def, c.values = append(c.rep, rep...), append(c.def, def...), append(c.values, vals...)
	return nil
}

// deltaBinaryPacked decodes DELTA_BINARY_PACKED values (Encodings.md):
// a header (block size, miniblocks per block, count, first value), then
// blocks of a minimum delta, one bit width per miniblock and the
// miniblocks' bit-packed deltas; it returns the values and what follows.
func deltaBinaryPacked(data []byte) ([]int64, []byte, error) {
	r := &thriftReader{b: data}
	blockSize, err := r.uvarint()
	if err != nil {
		return nil, nil, err
	}
	miniblocks, err := r.uvarint()
	if err != nil || miniblocks == 0 {
		return nil, nil, errors.New("delta: no miniblocks")
	}
	count, err := r.uvarint()
	if err != nil {
		return nil, nil, err
	}
	v, err := r.zigzag()
	if err != nil {
		return nil, nil, err
	}
	out := make([]int64, 0, count)
	if count > 0 {
		out = append(out, v)
	}
	per := int(blockSize / miniblocks)
	for uint64(len(out)) < count {
		minDelta, err := r.zigzag()
		if err != nil {
			return nil, nil, err
		}
		widths := r.b[r.pos : r.pos+int(miniblocks)]
		r.pos += int(miniblocks)
		for _, w := range widths {
			if uint64(len(out)) >= count {
				break // the block's last miniblocks are not written
			}
			width := int(w)
			packed := r.b[r.pos : r.pos+per*width/8]
			r.pos += per * width / 8
			for i := 0; i < per; i++ {
				d := uint64(0)
				for b := 0; b < width; b++ {
					bit := i*width + b
					if packed[bit/8]>>(bit%8)&1 == 1 {
						d |= 1 << b
					}
				}
				if uint64(len(out)) < count {
					v += minDelta + int64(d)
					out = append(out, v)
				}
			}
		}
	}
	return out, r.b[r.pos:], nil
}

func bitWidth(max int) int { return bits.Len(uint(max)) }

// v1Levels reads a data page v1's levels: none when max is 0, else a
// 4-byte length and the hybrid encoding.
func v1Levels(data []byte, max, n int) ([]int, []byte, error) {
	if max == 0 {
		return make([]int, n), data, nil
	}
	if len(data) < 4 {
		return nil, nil, errors.New("short levels")
	}
	l := int(binary.LittleEndian.Uint32(data))
	lv, err := hybrid(data[4:4+l], bitWidth(max), n)
	return lv, data[4+l:], err
}

// hybrid decodes n values of the RLE/bit-packed hybrid encoding.
func hybrid(data []byte, width, n int) ([]int, error) {
	out := make([]int, 0, n)
	if width == 0 {
		return make([]int, n), nil
	}
	for pos := 0; len(out) < n; {
		h, k := binary.Uvarint(data[pos:])
		if k <= 0 {
			return nil, errors.New("hybrid: bad header")
		}
		pos += k
		if h&1 == 0 {
			run, nb := int(h>>1), (width+7)/8
			var v int
			for i := 0; i < nb; i++ {
				v |= int(data[pos+i]) << (8 * i)
			}
			pos += nb
			for i := 0; i < run && len(out) < n; i++ {
				out = append(out, v)
			}
			continue
		}
		groups := int(h >> 1)
		for g := 0; g < groups; g++ {
			chunk := data[pos : pos+width]
			pos += width
			for i := 0; i < 8; i++ {
				v := 0
				for b := 0; b < width; b++ {
					bit := i*width + b
					if chunk[bit/8]>>(bit%8)&1 == 1 {
						v |= 1 << b
					}
				}
				if len(out) < n {
					out = append(out, v)
				}
			}
		}
	}
	return out, nil
}

// plainValues decodes n plain values of a physical type.
func plainValues(data []byte, typ int64, n int) ([]any, []byte, error) {
	out := make([]any, 0, n)
	for i := 0; i < n; i++ {
		switch typ {
		case 1:
			if len(data) < 4 {
				return nil, nil, errors.New("short int32")
			}
			out = append(out, int64(int32(binary.LittleEndian.Uint32(data))))
			data = data[4:]
		case 2:
			if len(data) < 8 {
				return nil, nil, errors.New("short int64")
			}
			out = append(out, int64(binary.LittleEndian.Uint64(data)))
			data = data[8:]
		case 6:
			if len(data) < 4 {
				return nil, nil, errors.New("short byte array")
			}
			l := int(binary.LittleEndian.Uint32(data))
			out = append(out, string(data[4:4+l]))
			data = data[4+l:]
		default:
			return nil, nil, fmt.Errorf("physical type %d", typ)
		}
	}
	return out, data, nil
}

// rows assembles a column into one value per row: a scalar (nil when
// null), or a list of the values of a repeated column.
func (c *pqColumn) rows() []any {
	var out []any
	vi := 0
	for i, d := range c.def {
		if c.leaf.maxRep == 0 {
			if d == c.leaf.maxDef {
				out = append(out, c.values[vi])
				vi++
			} else {
				out = append(out, nil)
			}
			continue
		}
		if c.rep[i] == 0 {
			out = append(out, []int64{})
		}
		if d == c.leaf.maxDef {
			out[len(out)-1] = append(out[len(out)-1].([]int64), c.values[vi].(int64))
			vi++
		}
	}
	return out
}
