package gguf

import (
	"bytes"
	"encoding/hex"
	"math"
	"reflect"
	"strings"
	"testing"
)

// hexBytes decodes hex written with spaces for reading and a # comment
// at the end of a line.
func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	var digits strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenBytes pins the encoding of a one-pair, one-tensor file against
// bytes written out by hand from the specification.
func TestGoldenBytes(t *testing.T) {
	f := &File{
		KV:      []KV{{"general.architecture", "llama"}},
		Tensors: []Tensor{{Name: "t", Type: F32, Shape: []uint64{2}, Data: F32Data([]float32{1, -2})}},
	}
	want := hexBytes(t, `
		47475546                          # "GGUF"
		03000000                          # version 3
		0100000000000000                  # 1 tensor
		0100000000000000                  # 1 pair
		1400000000000000                  # key: 20 bytes,
		67656e6572616c2e617263686974656374757265 # "general.architecture"
		08000000                          # a string:
		0500000000000000 6c6c616d61       # "llama"
		0100000000000000 74               # tensor "t"
		01000000                          # 1 dimension
		0200000000000000                  # of 2
		00000000                          # F32
		0000000000000000                  # at offset 0
		0000000000000000000000000000000000000000000000000000 # 26 bytes of padding: data at 128
		0000803f 000000c0                 # 1, -2
		000000000000000000000000000000000000000000000000 # 24 bytes: the last tensor padded to 32
	`)
	got, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	lay, err := f.Layout()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Layout{DataStart: 128, Offsets: []uint64{0}, Size: 160}); !reflect.DeepEqual(lay, want) {
		t.Errorf("layout %+v, want %+v", lay, want)
	}
	back, err := Parse(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, f) {
		t.Errorf("parsed %+v, want %+v", back, f)
	}
}

func floats(n int) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) + 0.5
	}
	return F32Data(v)
}

// TestAlignment lays out tensors of 12, 20 and 4 bytes under several
// alignments and checks every offset, the zero padding and the round trip.
func TestAlignment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kv      []KV
		offsets []uint64
		data    uint64 // bytes of the data section
	}{
		{"default 32", nil, []uint64{0, 32, 64}, 96},
		{"64", []KV{{AlignmentKey, uint32(64)}}, []uint64{0, 64, 128}, 192},
		{"8", []KV{{AlignmentKey, uint32(8)}}, []uint64{0, 16, 40}, 48},
		{"256", []KV{{AlignmentKey, uint32(256)}}, []uint64{0, 256, 512}, 768},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &File{KV: tc.kv, Tensors: []Tensor{
				{Name: "a", Type: F32, Shape: []uint64{3}, Data: floats(3)},
				{Name: "b", Type: I16, Shape: []uint64{5, 2}, Data: bytes.Repeat([]byte{7}, 20)},
				{Name: "c", Type: F32, Shape: []uint64{1, 1, 1, 1}, Data: floats(1)},
			}}
			b, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			lay, err := f.Layout()
			if err != nil {
				t.Fatal(err)
			}
			a, _ := f.Alignment()
			if lay.DataStart%a != 0 || lay.DataStart == 0 {
				t.Errorf("data section at %d, not a multiple of %d", lay.DataStart, a)
			}
			if !reflect.DeepEqual(lay.Offsets, tc.offsets) || lay.Size != lay.DataStart+tc.data || uint64(len(b)) != lay.Size {
				t.Errorf("offsets %v size %d (file %d), want %v and %d", lay.Offsets, lay.Size, len(b), tc.offsets, lay.DataStart+tc.data)
			}
			// Every byte of the data section that is not a tensor's is zero.
			used := make([]bool, len(b))
			for i, tn := range f.Tensors {
				at := lay.DataStart + lay.Offsets[i]
				if !bytes.Equal(b[at:at+uint64(len(tn.Data))], tn.Data) {
					t.Errorf("tensor %s is not at %d", tn.Name, at)
				}
				for j := range tn.Data {
					used[int(at)+j] = true
				}
			}
			for i := int(lay.DataStart); i < len(b); i++ {
				if !used[i] && b[i] != 0 {
					t.Fatalf("padding byte %d is %d", i, b[i])
				}
			}
			back, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, f) {
				t.Errorf("round trip\n got %+v\nwant %+v", back, f)
			}
		})
	}
}

// allValues has a pair of every value type, arrays of each, empty arrays
// and arrays of arrays.
var allValues = []KV{
	{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
	{"u32", uint32(4e9)}, {"i32", int32(-2e9)}, {"f32", float32(-1.5)}, {"t", true}, {"f", false},
	{"s", "héllo\x00"}, {"empty", ""}, {"u64", uint64(math.MaxUint64)}, {"i64", int64(math.MinInt64)},
	{"f64", math.Pi},
	{"a.u8", []uint8{1, 2}}, {"a.i8", []int8{-1}}, {"a.u16", []uint16{1}}, {"a.i16", []int16{-2}},
	{"a.u32", []uint32{3, 4, 5}}, {"a.i32", []int32{-3}}, {"a.f32", []float32{0.25}}, {"a.bool", []bool{true, false}},
	{"a.s", []string{"", "x", "▁the"}}, {"a.u64", []uint64{1 << 40}}, {"a.i64", []int64{-1 << 40}},
	{"a.f64", []float64{1e300}}, {"a.empty", []string{}},
	{"a.nested", []any{[]int32{1, 2}, []string{"a"}, []any{[]bool{true}}, []uint8{}}},
}

func TestValuesRoundTrip(t *testing.T) {
	f := &File{KV: allValues}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.KV, f.KV) {
		t.Errorf("round trip\n got %#v\nwant %#v", back.KV, f.KV)
	}
	if len(back.Tensors) != 0 {
		t.Errorf("%d tensors, want none", len(back.Tensors))
	}
}

func TestWriteRefuses(t *testing.T) {
	ok := Tensor{Name: "w", Type: F32, Shape: []uint64{2}, Data: floats(2)}
	for _, tc := range []struct {
		name string
		f    File
		want string
	}{
		{"alignment type", File{KV: []KV{{AlignmentKey, uint64(32)}}}, "want uint32"},
		{"alignment 12", File{KV: []KV{{AlignmentKey, uint32(12)}}}, "multiple of 8"},
		{"alignment 0", File{KV: []KV{{AlignmentKey, uint32(0)}}}, "multiple of 8"},
		{"duplicate key", File{KV: []KV{{"k", "a"}, {"k", "b"}}}, "twice"},
		{"empty key", File{KV: []KV{{"", "a"}}}, "key of 0 bytes"},
		{"non-ASCII key", File{KV: []KV{{"clé", "a"}}}, "not ASCII"},
		{"int value", File{KV: []KV{{"k", 3}}}, "int is not a GGUF value"},
		{"map value", File{KV: []KV{{"k", map[string]int{}}}}, "is not a GGUF value"},
		{"nested scalar", File{KV: []KV{{"k", []any{"x"}}}}, "not an array"},
		{"short data", File{Tensors: []Tensor{{Name: "w", Type: F32, Shape: []uint64{3}, Data: floats(2)}}}, "8 bytes of data, want 12"},
		{"no dims", File{Tensors: []Tensor{{Name: "w", Type: F32, Data: nil}}}, "0 dimensions"},
		{"5 dims", File{Tensors: []Tensor{{Name: "w", Type: F32, Shape: []uint64{1, 1, 1, 1, 1}, Data: floats(1)}}}, "5 dimensions"},
		{"quantized", File{Tensors: []Tensor{{Name: "w", Type: 2, Shape: []uint64{32}, Data: make([]byte, 18)}}}, "type 2 is not one"},
		{"long name", File{Tensors: []Tensor{{Name: strings.Repeat("n", 65), Type: F32, Shape: []uint64{1}, Data: floats(1)}}}, "want 1 to 64 bytes"},
		{"duplicate tensor", File{Tensors: []Tensor{ok, ok}}, `tensor "w" twice`},
		{"overflow", File{Tensors: []Tensor{{Name: "w", Type: F32, Shape: []uint64{1 << 32, 1 << 32}}}}, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			n, err := tc.f.WriteTo(&b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if n != 0 || b.Len() != 0 {
				t.Errorf("%d bytes written before the refusal", b.Len())
			}
		})
	}
}

// sample is a small valid file with several tensors and every value type.
func sample(t testing.TB) []byte {
	f := &File{KV: allValues, Tensors: []Tensor{
		{Name: "a", Type: F32, Shape: []uint64{3}, Data: floats(3)},
		{Name: "b", Type: F16, Shape: []uint64{2, 3}, Data: bytes.Repeat([]byte{1}, 12)},
		{Name: "c", Type: I8, Shape: []uint64{5}, Data: []byte{1, 2, 3, 4, 5}},
	}}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseTruncated cuts a valid file at every length: each cut is
// refused until only the trailing padding after the last tensor is gone.
func TestParseTruncated(t *testing.T) {
	b := sample(t)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	lay, _ := f.Layout()
	last := len(f.Tensors) - 1
	end := int(lay.DataStart + lay.Offsets[last] + uint64(len(f.Tensors[last].Data)))
	for n := range len(b) {
		_, err := Parse(b[:n])
		if n < end && err == nil {
			t.Fatalf("cut at %d of %d (data ends at %d) parsed", n, len(b), end)
		}
		if n >= end && err != nil {
			t.Fatalf("cut at %d, after the last tensor's data: %v", n, err)
		}
	}
}

// header builds the start of a file by hand: magic, version, counts.
func header(version uint32, tensors, kvs uint64) []byte {
	b := le.AppendUint32([]byte(Magic), version)
	b = le.AppendUint64(b, tensors)
	return le.AppendUint64(b, kvs)
}

func TestParseRefuses(t *testing.T) {
	kv := func(key string, typ ValueType, payload ...byte) []byte {
		b := appendString(nil, key)
		b = le.AppendUint32(b, uint32(typ))
		return append(b, payload...)
	}
	tensorInfo := func(name string, dims []uint64, typ Type, off uint64) []byte {
		b := appendString(nil, name)
		b = le.AppendUint32(b, uint32(len(dims)))
		for _, d := range dims {
			b = le.AppendUint64(b, d)
		}
		b = le.AppendUint32(b, uint32(typ))
		return le.AppendUint64(b, off)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	pad := make([]byte, 64)
	nested := le.AppendUint32(nil, uint32(TypeArray))
	for range maxNesting + 1 {
		nested = le.AppendUint64(nested, 1)
		nested = le.AppendUint32(nested, uint32(TypeArray))
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "4 bytes needed"},
		{"magic", append([]byte("GGML"), make([]byte, 20)...), "not a GGUF file"},
		{"version 1", header(1, 0, 0), "version 1"},
		{"big-endian", append([]byte(Magic), 0, 0, 0, 3), "version 50331648"},
		{"tensor count", header(3, 1<<60, 0), "tensors cannot fit"},
		{"pair count", header(3, 0, math.MaxUint64), "metadata pairs cannot fit"},
		{"string length", cat(header(3, 0, 1), le.AppendUint64(nil, math.MaxUint64), pad), "string of 18446744073709551615 bytes"},
		{"array length", cat(header(3, 0, 1), kv("k", TypeArray, le.AppendUint64(le.AppendUint32(nil, uint32(TypeUint32)), 1<<40)...)), "array elements cannot fit"},
		{"value type", cat(header(3, 0, 1), kv("k", 13, 0)), "unknown value type 13"},
		{"array type", cat(header(3, 0, 1), kv("k", TypeArray, le.AppendUint64(le.AppendUint32(nil, 99), 0)...)), "array of unknown value type 99"},
		{"bool", cat(header(3, 0, 1), kv("k", TypeBool, 2)), "bool byte 2"},
		{"duplicate key", cat(header(3, 0, 2), kv("k", TypeUint8, 1), kv("k", TypeUint8, 2)), `"k" twice`},
		{"non-ASCII key", cat(header(3, 0, 1), kv("é", TypeUint8, 1)), "not ASCII"},
		{"nesting", cat(header(3, 0, 1), kv("k", TypeArray, nested...)), "nested deeper than 16"},
		{"alignment", cat(header(3, 0, 1), kv(AlignmentKey, TypeUint32, 12, 0, 0, 0)), "multiple of 8"},
		{"dimensions", cat(header(3, 1, 0), tensorInfo("w", []uint64{1, 1, 1, 1, 1}, F32, 0)), "5 dimensions"},
		{"no dimensions", cat(header(3, 1, 0), tensorInfo("w", nil, F32, 0), pad), "0 dimensions"},
		{"tensor type", cat(header(3, 1, 0), tensorInfo("w", []uint64{32}, 12, 0), pad), "type 12 is not one"},
		{"shape overflow", cat(header(3, 1, 0), tensorInfo("w", []uint64{1 << 62, 4}, F32, 0), pad), "too large"},
		{"misaligned", cat(header(3, 1, 0), tensorInfo("w", []uint64{1}, F32, 4), pad), "offset 4 is not a multiple of the alignment 32"},
		{"past the end", cat(header(3, 1, 0), tensorInfo("w", []uint64{32}, F32, 0), pad), "run past the data section"},
		{"offset past the end", cat(header(3, 1, 0), tensorInfo("w", []uint64{1}, F32, 1<<63), pad), "run past the data section"},
		{"duplicate tensor", cat(header(3, 2, 0), tensorInfo("w", []uint64{1}, F32, 0), tensorInfo("w", []uint64{1}, F32, 32), pad), `"w" twice`},
		{"long name", cat(header(3, 1, 0), tensorInfo(strings.Repeat("n", 65), []uint64{1}, F32, 0), pad), "want 1 to 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestParseVersion2 reads a version 2 file, whose layout is version 3's.
func TestParseVersion2(t *testing.T) {
	b := sample(t)
	le.PutUint32(b[4:], 2)
	if _, err := Parse(b); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse feeds the reader arbitrary bytes: it must not panic, and a
// file it accepts must write back to bytes that parse to the same file.
func FuzzParse(f *testing.F) {
	f.Add(sample(f))
	tiny, err := (&File{Tensors: []Tensor{{Name: "x", Type: F32, Shape: []uint64{1}, Data: floats(1)}}}).MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tiny)
	f.Add(header(3, 0, 0))
	f.Add(header(2, 1, 1))
	for _, cut := range []int{30, 100, 500} {
		b := sample(f)
		f.Add(b[:cut])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			return
		}
		once, err := file.MarshalBinary()
		if err != nil {
			t.Fatalf("a parsed file does not write: %v", err)
		}
		again, err := Parse(once)
		if err != nil {
			t.Fatalf("a written file does not parse: %v", err)
		}
		twice, err := again.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("write(parse(write(parse(b)))) differs from write(parse(b))")
		}
	})
}
