// Package gguf writes and reads GGUF files, the model format of ggml and
// the servers built on it (llama.cpp, Ollama), after the specification in
// ggml's docs/gguf.md (version 3, little-endian). tokenmill uses it to make
// the tiny random-weight models that real inference servers load in tests
// (see Llama); the reader exists to check what the writer wrote.
//
// A file is a header (magic "GGUF", version, tensor and metadata counts),
// the metadata key-value pairs, one info record per tensor (name, shape,
// element type, data offset), padding to the alignment, then the tensors'
// data, each starting at a multiple of the alignment (general.alignment,
// 32 when absent).
package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

const (
	// Magic opens every GGUF file.
	Magic = "GGUF"
	// Version is the format version written.
	Version = 3
	// DefaultAlignment is the data alignment when general.alignment is absent.
	DefaultAlignment = 32
	// AlignmentKey sets the data alignment (a uint32, a multiple of 8).
	AlignmentKey = "general.alignment"
	// MaxDims is the most dimensions a tensor has in ggml.
	MaxDims = 4
	// MaxNameLen is the longest tensor name the specification allows.
	MaxNameLen = 64
)

// Type is a tensor's element type (ggml_type). Only the types whose size
// is one fixed width per element are known to this package.
type Type uint32

// Element types (the values of ggml_type).
const (
	F32  Type = 0
	F16  Type = 1
	I8   Type = 24
	I16  Type = 25
	I32  Type = 26
	I64  Type = 27
	F64  Type = 28
	BF16 Type = 30
)

// Size is the width of one element in bytes, 0 for a type unknown here
// (the quantized block types).
func (t Type) Size() int {
	switch t {
	case I8:
		return 1
	case F16, BF16, I16:
		return 2
	case F32, I32:
		return 4
	case I64, F64:
		return 8
	}
	return 0
}

func (t Type) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case I8:
		return "I8"
	case I16:
		return "I16"
	case I32:
		return "I32"
	case I64:
		return "I64"
	case F64:
		return "F64"
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// ValueType is a metadata value's type (gguf_metadata_value_type).
type ValueType uint32

// Metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// KV is one metadata pair. Value is one of uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, a slice of
// one of those (an array), or []any whose elements are themselves arrays
// (an array of arrays, each with its own element type). The Go type is the
// GGUF type: readers such as llama.cpp's insist on it (block_count is a
// uint32, not a uint64).
type KV struct {
	Key   string
	Value any
}

// Tensor is one tensor: Shape lists its dimensions innermost first (ggml's
// ne[0] is the row length), Data its elements little-endian, row-major.
type Tensor struct {
	Name  string
	Type  Type
	Shape []uint64
	Data  []byte
}

// Elements is the product of the dimensions, or false on overflow.
func (t *Tensor) Elements() (uint64, bool) {
	n := uint64(1)
	for _, d := range t.Shape {
		if d != 0 && n > math.MaxUint64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// File is a whole GGUF file: metadata in file order, then tensors in the
// order their data is laid out.
type File struct {
	KV      []KV
	Tensors []Tensor
}

// Get returns the value of key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Alignment is the file's data alignment: general.alignment, or
// DefaultAlignment when absent.
func (f *File) Alignment() (uint64, error) {
	v, ok := f.Get(AlignmentKey)
	if !ok {
		return DefaultAlignment, nil
	}
	a, ok := v.(uint32)
	if !ok {
		return 0, fmt.Errorf("%s is a %T, want uint32", AlignmentKey, v)
	}
	if a == 0 || a%8 != 0 {
		return 0, fmt.Errorf("%s %d is not a positive multiple of 8", AlignmentKey, a)
	}
	return uint64(a), nil
}

// align rounds n up to a multiple of a.
func align(n, a uint64) uint64 {
	return n + (a-n%a)%a
}

// F32Data encodes float32 elements for a tensor of type F32.
func F32Data(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}
