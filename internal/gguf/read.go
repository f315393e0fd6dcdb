package gguf

import (
	"fmt"
	"math"
	"os"
)

// maxNesting bounds arrays of arrays, so a hostile file cannot recurse
// without end.
const maxNesting = 16

// ReadFile parses the GGUF file at path.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a whole GGUF file (version 2 or 3, little-endian). Every
// count and length is checked against the bytes that remain before
// anything is allocated for it, and every tensor must lie aligned inside
// the data section. Tensor Data slices b, without a copy.
func Parse(b []byte) (*File, error) {
	d := &decoder{b: b}
	f, err := d.file()
	if err != nil {
		return nil, fmt.Errorf("gguf: at byte %d: %w", d.off, err)
	}
	return f, nil
}

type decoder struct {
	b   []byte
	off int
}

func (d *decoder) left() uint64 { return uint64(len(d.b) - d.off) }

func (d *decoder) take(n uint64) ([]byte, error) {
	if n > d.left() {
		return nil, fmt.Errorf("%d bytes needed, %d left", n, d.left())
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p, nil
}

func (d *decoder) u8() (uint8, error) {
	p, err := d.take(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

func (d *decoder) u16() (uint16, error) {
	p, err := d.take(2)
	if err != nil {
		return 0, err
	}
	return le.Uint16(p), nil
}

func (d *decoder) u32() (uint32, error) {
	p, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return le.Uint32(p), nil
}

func (d *decoder) u64() (uint64, error) {
	p, err := d.take(8)
	if err != nil {
		return 0, err
	}
	return le.Uint64(p), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	p, err := d.take(n)
	if err != nil {
		return "", fmt.Errorf("string of %d bytes: %w", n, err)
	}
	return string(p), nil
}

// count reads an element count and checks that n elements of at least
// least bytes each fit in what is left.
func (d *decoder) count(what string, least uint64) (int, error) {
	n, err := d.u64()
	if err != nil {
		return 0, err
	}
	if n > d.left()/least {
		return 0, fmt.Errorf("%d %s cannot fit in the %d bytes left", n, what, d.left())
	}
	return int(n), nil
}

func (d *decoder) file() (*File, error) {
	magic, err := d.take(4)
	if err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("magic %q, not %q: not a GGUF file", magic, Magic)
	}
	v, err := d.u32()
	if err != nil {
		return nil, err
	}
	if v != 2 && v != 3 {
		return nil, fmt.Errorf("version %d (read: 2 and 3, little-endian)", v)
	}
	// A tensor info takes at least 28 bytes, a pair at least 13.
	nt, err := d.count("tensors", 28)
	if err != nil {
		return nil, err
	}
	nkv, err := d.count("metadata pairs", 13)
	if err != nil {
		return nil, err
	}
	f := &File{}
	keys := make(map[string]bool, nkv)
	for range nkv {
		k, err := d.str()
		if err != nil {
			return nil, fmt.Errorf("metadata key: %w", err)
		}
		if err := checkKey(k); err != nil {
			return nil, err
		}
		if keys[k] {
			return nil, fmt.Errorf("metadata key %q twice", k)
		}
		keys[k] = true
		t, err := d.u32()
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(t), 0)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, err)
		}
		f.KV = append(f.KV, KV{Key: k, Value: v})
	}
	a, err := f.Alignment()
	if err != nil {
		return nil, err
	}

	offsets := make([]uint64, nt)
	names := make(map[string]bool, nt)
	for i := range nt {
		t, err := d.tensorInfo(&offsets[i])
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("tensor %q twice", t.Name)
		}
		names[t.Name] = true
		f.Tensors = append(f.Tensors, t)
	}

	start := align(uint64(d.off), a)
	if start > uint64(len(d.b)) {
		if nt == 0 {
			return f, nil // metadata only, no data section
		}
		return nil, fmt.Errorf("data section at %d is past the end (%d bytes)", start, len(d.b))
	}
	data := d.b[start:]
	for i := range f.Tensors {
		t := &f.Tensors[i]
		n, _ := t.Elements() // bounded by tensorInfo
		size := n * uint64(t.Type.Size())
		off := offsets[i]
		if off%a != 0 {
			return nil, fmt.Errorf("tensor %q: offset %d is not a multiple of the alignment %d", t.Name, off, a)
		}
		if off > uint64(len(data)) || size > uint64(len(data))-off {
			return nil, fmt.Errorf("tensor %q: %d bytes at offset %d run past the data section (%d bytes)", t.Name, size, off, len(data))
		}
		t.Data = data[off : off+size : off+size]
	}
	return f, nil
}

func (d *decoder) tensorInfo(off *uint64) (Tensor, error) {
	name, err := d.str()
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor name: %w", err)
	}
	if name == "" || len(name) > MaxNameLen {
		return Tensor{}, fmt.Errorf("tensor name %q: want 1 to %d bytes", name, MaxNameLen)
	}
	nd, err := d.u32()
	if err != nil {
		return Tensor{}, err
	}
	if nd == 0 || nd > MaxDims {
		return Tensor{}, fmt.Errorf("tensor %q: %d dimensions (want 1 to %d)", name, nd, MaxDims)
	}
	t := Tensor{Name: name, Shape: make([]uint64, nd)}
	for j := range t.Shape {
		if t.Shape[j], err = d.u64(); err != nil {
			return Tensor{}, err
		}
	}
	typ, err := d.u32()
	if err != nil {
		return Tensor{}, err
	}
	t.Type = Type(typ)
	size := t.Type.Size()
	if size == 0 {
		return Tensor{}, fmt.Errorf("tensor %q: element type %s is not one this package sizes", name, t.Type)
	}
	if n, ok := t.Elements(); !ok || n > math.MaxInt64/uint64(size) {
		return Tensor{}, fmt.Errorf("tensor %q: shape %v is too large", name, t.Shape)
	}
	*off, err = d.u64()
	return t, err
}

// minSize is the fewest bytes one array element of type t takes.
func minSize(t ValueType) uint64 {
	switch t {
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64, TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return 1
}

func (d *decoder) value(t ValueType, depth int) (any, error) {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		v, err := d.u8()
		return int8(v), err
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		v, err := d.u16()
		return int16(v), err
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		v, err := d.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := d.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		v, err := d.u8()
		if err == nil && v > 1 {
			return nil, fmt.Errorf("bool byte %d (want 0 or 1)", v)
		}
		return v == 1, err
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		v, err := d.u64()
		return int64(v), err
	case TypeFloat64:
		v, err := d.u64()
		return math.Float64frombits(v), err
	case TypeArray:
		if depth >= maxNesting {
			return nil, fmt.Errorf("arrays nested deeper than %d", maxNesting)
		}
		et, err := d.u32()
		if err != nil {
			return nil, err
		}
		return d.array(ValueType(et), depth+1)
	}
	return nil, fmt.Errorf("unknown value type %d", t)
}

func (d *decoder) array(t ValueType, depth int) (any, error) {
	if t > TypeFloat64 {
		return nil, fmt.Errorf("array of unknown value type %d", t)
	}
	n, err := d.count("array elements", minSize(t))
	if err != nil {
		return nil, err
	}
	switch t {
	case TypeUint8:
		return readEach[uint8](d, n, t, depth)
	case TypeInt8:
		return readEach[int8](d, n, t, depth)
	case TypeUint16:
		return readEach[uint16](d, n, t, depth)
	case TypeInt16:
		return readEach[int16](d, n, t, depth)
	case TypeUint32:
		return readEach[uint32](d, n, t, depth)
	case TypeInt32:
		return readEach[int32](d, n, t, depth)
	case TypeFloat32:
		return readEach[float32](d, n, t, depth)
	case TypeBool:
		return readEach[bool](d, n, t, depth)
	case TypeString:
		return readEach[string](d, n, t, depth)
	case TypeUint64:
		return readEach[uint64](d, n, t, depth)
	case TypeInt64:
		return readEach[int64](d, n, t, depth)
	case TypeFloat64:
		return readEach[float64](d, n, t, depth)
	}
	return readEach[any](d, n, t, depth)
}

func readEach[T any](d *decoder, n int, t ValueType, depth int) ([]T, error) {
	s := make([]T, n)
	for i := range s {
		v, err := d.value(t, depth)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		s[i] = v.(T)
	}
	return s, nil
}
