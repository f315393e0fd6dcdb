package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

var le = binary.LittleEndian

// Layout is where a file's parts go: DataStart is the file offset of the
// tensor data section, Offsets each tensor's offset within that section
// (what its info record holds), Size the length of the whole file.
type Layout struct {
	DataStart uint64
	Offsets   []uint64
	Size      uint64
}

// WriteTo writes the file. Each tensor's data starts at a multiple of the
// alignment and is padded with zeros to the next one, the last included,
// as ggml's own writer does. Nothing is written if the file is invalid.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	head, lay, err := f.encodeHead()
	if err != nil {
		return 0, err
	}
	var n int64
	write := func(b []byte) error {
		m, err := w.Write(b)
		n += int64(m)
		return err
	}
	if err := write(head); err != nil {
		return n, err
	}
	a, _ := f.Alignment() // checked by encodeHead
	pad := make([]byte, a)
	at := uint64(len(head))
	for i, t := range f.Tensors {
		next := lay.DataStart + lay.Offsets[i]
		if err := write(pad[:next-at]); err != nil {
			return n, err
		}
		if err := write(t.Data); err != nil {
			return n, err
		}
		at = next + uint64(len(t.Data))
	}
	if err := write(pad[:lay.Size-at]); err != nil {
		return n, err
	}
	return n, nil
}

// MarshalBinary returns the file's bytes.
func (f *File) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	if _, err := f.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Layout computes where WriteTo puts each part.
func (f *File) Layout() (Layout, error) {
	_, lay, err := f.encodeHead()
	return lay, err
}

// encodeHead validates the file and encodes everything before the data
// section's padding: header, metadata, tensor infos.
func (f *File) encodeHead() ([]byte, Layout, error) {
	a, err := f.Alignment()
	if err != nil {
		return nil, Layout{}, err
	}
	b := append([]byte(Magic), 0, 0, 0, 0)
	le.PutUint32(b[4:], Version)
	b = le.AppendUint64(b, uint64(len(f.Tensors)))
	b = le.AppendUint64(b, uint64(len(f.KV)))

	keys := make(map[string]bool, len(f.KV))
	for _, kv := range f.KV {
		if err := checkKey(kv.Key); err != nil {
			return nil, Layout{}, err
		}
		if keys[kv.Key] {
			return nil, Layout{}, fmt.Errorf("metadata key %q twice", kv.Key)
		}
		keys[kv.Key] = true
		vt, ok := valueType(kv.Value)
		if !ok {
			return nil, Layout{}, fmt.Errorf("metadata %q: %T is not a GGUF value", kv.Key, kv.Value)
		}
		b = appendString(b, kv.Key)
		b = le.AppendUint32(b, uint32(vt))
		if b, err = appendValue(b, kv.Value); err != nil {
			return nil, Layout{}, fmt.Errorf("metadata %q: %w", kv.Key, err)
		}
	}

	lay := Layout{Offsets: make([]uint64, len(f.Tensors))}
	names := make(map[string]bool, len(f.Tensors))
	var off uint64
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if err := checkTensor(t); err != nil {
			return nil, Layout{}, err
		}
		if names[t.Name] {
			return nil, Layout{}, fmt.Errorf("tensor %q twice", t.Name)
		}
		names[t.Name] = true
		b = appendString(b, t.Name)
		b = le.AppendUint32(b, uint32(len(t.Shape)))
		for _, d := range t.Shape {
			b = le.AppendUint64(b, d)
		}
		b = le.AppendUint32(b, uint32(t.Type))
		b = le.AppendUint64(b, off)
		lay.Offsets[i] = off
		off = align(off+uint64(len(t.Data)), a)
	}
	lay.DataStart = align(uint64(len(b)), a)
	lay.Size = lay.DataStart + off
	return b, lay, nil
}

func checkKey(k string) error {
	if k == "" || len(k) > math.MaxUint16 {
		return fmt.Errorf("metadata key of %d bytes (want 1 to %d)", len(k), math.MaxUint16)
	}
	for i := 0; i < len(k); i++ {
		if k[i] >= 0x80 {
			return fmt.Errorf("metadata key %q is not ASCII", k)
		}
	}
	return nil
}

func checkTensor(t *Tensor) error {
	if t.Name == "" || len(t.Name) > MaxNameLen {
		return fmt.Errorf("tensor name %q: want 1 to %d bytes", t.Name, MaxNameLen)
	}
	if len(t.Shape) == 0 || len(t.Shape) > MaxDims {
		return fmt.Errorf("tensor %q: %d dimensions (want 1 to %d)", t.Name, len(t.Shape), MaxDims)
	}
	size := t.Type.Size()
	if size == 0 {
		return fmt.Errorf("tensor %q: element type %s is not one this package sizes", t.Name, t.Type)
	}
	n, ok := t.Elements()
	if !ok || n > math.MaxInt64/uint64(size) {
		return fmt.Errorf("tensor %q: shape %v is too large", t.Name, t.Shape)
	}
	if uint64(len(t.Data)) != n*uint64(size) {
		return fmt.Errorf("tensor %q: %d bytes of data, want %d (%v %s)", t.Name, len(t.Data), n*uint64(size), t.Shape, t.Type)
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = le.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// valueType maps a Go value to its GGUF type.
func valueType(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case float32:
		return TypeFloat32, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float64:
		return TypeFloat64, true
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string,
		[]uint64, []int64, []float64, []any:
		return TypeArray, true
	}
	return 0, false
}

// elemType is an array's element type.
func elemType(v any) ValueType {
	switch v.(type) {
	case []uint8:
		return TypeUint8
	case []int8:
		return TypeInt8
	case []uint16:
		return TypeUint16
	case []int16:
		return TypeInt16
	case []uint32:
		return TypeUint32
	case []int32:
		return TypeInt32
	case []float32:
		return TypeFloat32
	case []bool:
		return TypeBool
	case []string:
		return TypeString
	case []uint64:
		return TypeUint64
	case []int64:
		return TypeInt64
	case []float64:
		return TypeFloat64
	}
	return TypeArray
}

var errNotArray = errors.New("an array of arrays holds a value that is not an array")

// appendValue encodes a value without its type tag; an array carries its
// element type and length.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case uint8:
		return append(b, x), nil
	case int8:
		return append(b, byte(x)), nil
	case uint16:
		return le.AppendUint16(b, x), nil
	case int16:
		return le.AppendUint16(b, uint16(x)), nil
	case uint32:
		return le.AppendUint32(b, x), nil
	case int32:
		return le.AppendUint32(b, uint32(x)), nil
	case float32:
		return le.AppendUint32(b, math.Float32bits(x)), nil
	case bool:
		if x {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case string:
		return appendString(b, x), nil
	case uint64:
		return le.AppendUint64(b, x), nil
	case int64:
		return le.AppendUint64(b, uint64(x)), nil
	case float64:
		return le.AppendUint64(b, math.Float64bits(x)), nil
	case []any:
		b = le.AppendUint32(b, uint32(TypeArray))
		b = le.AppendUint64(b, uint64(len(x)))
		for _, e := range x {
			if t, ok := valueType(e); !ok || t != TypeArray {
				return nil, errNotArray
			}
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	if t, ok := valueType(v); ok && t == TypeArray {
		return appendArray(b, v), nil
	}
	return nil, fmt.Errorf("%T is not a GGUF value", v)
}

// appendArray encodes an array of scalars.
func appendArray(b []byte, v any) []byte {
	b = le.AppendUint32(b, uint32(elemType(v)))
	switch x := v.(type) {
	case []uint8:
		return appendEach(b, x)
	case []int8:
		return appendEach(b, x)
	case []uint16:
		return appendEach(b, x)
	case []int16:
		return appendEach(b, x)
	case []uint32:
		return appendEach(b, x)
	case []int32:
		return appendEach(b, x)
	case []float32:
		return appendEach(b, x)
	case []bool:
		return appendEach(b, x)
	case []string:
		return appendEach(b, x)
	case []uint64:
		return appendEach(b, x)
	case []int64:
		return appendEach(b, x)
	case []float64:
		return appendEach(b, x)
	}
	panic(fmt.Sprintf("gguf: appendArray of %T", v))
}

func appendEach[T any](b []byte, s []T) []byte {
	b = le.AppendUint64(b, uint64(len(s)))
	for _, e := range s {
		b, _ = appendValue(b, e) // a scalar cannot fail
	}
	return b
}
