package record

import (
	"bytes"
	stdjson "encoding/json"
	"io"
	"testing"
	"unicode/utf8"

	"tokenmill/internal/recordtest"
)

// walkSeeds are every table of JSON this package's tests and recordtest
// hold; they seed FuzzWalk.
func walkSeeds() []string {
	seeds := append(append(append([]string{}, scanLines...), recordtest.Values...), recordtest.Records...)
	for _, tt := range unquoteTests {
		seeds = append(seeds, tt.q, `{`+tt.q+`:`+tt.q+`}`)
	}
	for _, tt := range depthCases(6) {
		seeds = append(seeds, tt.in)
	}
	return seeds
}

// TestWalk holds the walker to encoding/json on every seed, and on lines
// nested about as deep as a record may be (MaxDepth, which encoding/json
// also stops at).
func TestWalk(t *testing.T) {
	for _, s := range walkSeeds() {
		checkWalk(t, []byte(s))
	}
	for _, tt := range depthCases(MaxDepth) {
		checkWalk(t, []byte(tt.in))
	}
}

// FuzzWalk: the differential test of the walker against encoding/json.
func FuzzWalk(f *testing.F) {
	for _, s := range walkSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkWalk(t, line) })
}

// checkWalk asserts that the walker takes line as encoding/json does: it
// accepts exactly the valid lines, checking or trusting ends each value
// where the decoder does, fails nesting one deeper than its limit and
// takes nesting at it, finds what a string holds (escapes, bytes above
// ASCII) and so what it decodes to, and hands out the
// members and elements encoding/json reads. Object.Scan, the stages' fast
// path, takes exactly the valid objects no deeper than scanDepth whose
// keys hold no escape.
func checkWalk(t *testing.T, line []byte) {
	t.Helper()
	i := SkipSpace(line, 0)
	valid := stdjson.Valid(line)
	noting := Walker{NoteNonASCII: true}
	end := noting.ValueEnd(line, i, MaxDepth)
	if got := end >= 0 && SkipSpace(line, end) == len(line); got != valid {
		t.Fatalf("%q: the walk says valid %v, encoding/json %v", line, got, valid)
	}
	var o Object
	o.Scan(line)
	for _, _, ok := o.Next(); ok; _, _, ok = o.Next() {
	}
	trusting.ValueEnd(line, i, MaxDepth) // any line at all: no panic, no read past it
	if !valid {
		if o.Valid() {
			t.Fatalf("%q: Scan took a line encoding/json refuses", line)
		}
		return
	}
	if got := trusting.ValueEnd(line, i, MaxDepth); got != end {
		t.Fatalf("%q: the trusting walk ends at %d, the checking one at %d", line, got, end)
	}
	if high := bytes.ContainsFunc(line, func(r rune) bool { return r >= utf8.RuneSelf }); noting.SawNonASCII != high {
		t.Fatalf("%q: the walk says it saw non-ASCII %v", line, noting.SawNonASCII)
	}
	depth := nesting(t, line)
	if got := checking.ValueEnd(line, i, depth); got != end {
		t.Fatalf("%q: nested %d deep, the walk with that limit ends at %d, not %d", line, depth, got, end)
	}
	if got := checking.ValueEnd(line, i, depth-1); depth > 0 && got != tooDeep {
		t.Fatalf("%q: nested %d deep, the walk with one less ends at %d", line, depth, got)
	}
	escapedKey := false
	if line[i] == '{' {
		top := checking.Object(line, i, MaxDepth)
		for _, kind, at, ok := top.Member(); ok; _, kind, at, ok = top.Member() {
			escapedKey = escapedKey || kind&Escaped != 0
			top.Resume(top.ValueEnd(at))
		}
	}
	if want := line[i] == '{' && depth <= scanDepth && !escapedKey; o.Valid() != want {
		t.Fatalf("%q: Scan says valid %v, want %v", line, o.Valid(), want)
	}
	if depth <= 64 { // each level decodes the rest again
		checkValue(t, line[i:end])
	}
}

// nesting is how deeply the valid JSON line nests arrays and objects, by
// encoding/json's tokens (every level counts, a repeated key's too).
func nesting(t *testing.T, line []byte) int {
	d := stdjson.NewDecoder(bytes.NewReader(line))
	n, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return deepest
		}
		if err != nil {
			t.Fatal(err)
		}
		switch tok {
		case stdjson.Delim('['), stdjson.Delim('{'):
			n++
			deepest = max(deepest, n)
		case stdjson.Delim(']'), stdjson.Delim('}'):
			n--
		}
	}
}

// checkValue compares the walk of raw, one valid value, with what
// encoding/json reads of it, level by level.
func checkValue(t *testing.T, raw []byte) {
	t.Helper()
	var w Walker
	switch raw[0] {
	case '"':
		checkString(t, raw)
	case '{':
		var want map[string]stdjson.RawMessage
		if err := stdjson.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string][]byte{}
		o := w.Object(raw, 0, MaxDepth)
		for quoted, kind, at, ok := o.Member(); ok; quoted, kind, at, ok = o.Member() {
			checkKind(t, quoted, kind)
			key, _ := Unquote(quoted, nil)
			end := o.ValueEnd(at)
			o.Resume(end)
			got[key] = raw[at:end] // the last of repeated keys, as the decoder
			checkValue(t, raw[at:end])
		}
		if !o.Valid() || o.End() != len(raw) {
			t.Fatalf("%q: the members' walk stops at %d", raw, o.End())
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d keys walked, encoding/json has %d", raw, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%q: member %q is %q, encoding/json has %q", raw, k, got[k], v)
			}
		}
	case '[':
		var want []stdjson.RawMessage
		if err := stdjson.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		n := 0
		a := w.Array(raw, 0, MaxDepth)
		for at, ok := a.Element(); ok; at, ok = a.Element() {
			end := a.ValueEnd(at)
			a.Resume(end)
			if n >= len(want) || !bytes.Equal(raw[at:end], want[n]) {
				t.Fatalf("%q: element %d is %q, encoding/json has %d elements", raw, n, raw[at:end], len(want))
			}
			checkValue(t, raw[at:end])
			n++
		}
		if !a.Valid() || a.End() != len(raw) || n != len(want) {
			t.Fatalf("%q: the elements' walk stops at %d after %d", raw, a.End(), n)
		}
	}
}

// checkString: what the walk finds in the literal q holds, and its text
// decoded with that knowledge is encoding/json's.
func checkString(t *testing.T, q []byte) {
	t.Helper()
	end, kind := checking.StringEnd(q, 0)
	if end != len(q) {
		t.Fatalf("%q: the string ends at %d", q, end)
	}
	checkKind(t, q, kind)
	var want string
	if err := stdjson.Unmarshal(q, &want); err != nil {
		t.Fatal(err)
	}
	if got, _ := UnquoteKnown(q, nil, kind&Escaped != 0, kind&NonASCII != 0); got != want {
		t.Fatalf("%q decodes to %q, encoding/json's %q", q, got, want)
	}
}

// checkKind: a clear bit of kind is a promise kept.
func checkKind(t *testing.T, q []byte, kind StringKind) {
	t.Helper()
	if kind&Escaped == 0 && bytes.IndexByte(q, '\\') >= 0 {
		t.Fatalf("%q: an escape missed", q)
	}
	if kind&NonASCII == 0 && bytes.ContainsFunc(q, func(r rune) bool { return r >= utf8.RuneSelf }) {
		t.Fatalf("%q: a byte above ASCII missed", q)
	}
}

// TestTextKind puts one control character at every position of runs of
// every length up to 80, among bytes that are none (0x20, 0x7f, high
// ones), and one high byte among printable ASCII.
func TestTextKind(t *testing.T) {
	for _, fill := range [][]byte{{' ', 'a', 0x7f, 0x80, 0xff, '"', '\\'}, {' ', 'a', 0x7f, '"', '\\'}} {
		for n := 0; n <= 80; n++ {
			s := make([]byte, n)
			for i := range s {
				s[i] = fill[i%len(fill)]
			}
			want := plain
			if bytes.IndexFunc(s, func(r rune) bool { return r >= 0x80 || r == utf8.RuneError }) >= 0 {
				want = high
			}
			if got := textKind(s); got != want {
				t.Fatalf("length %d: %q is %d, want %d", n, s, got, want)
			}
			for i := range n {
				for _, c := range []byte{0, '\n', 0x1f, 0x80} {
					s2 := append([]byte(nil), s...)
					s2[i] = c
					want := control
					if c == 0x80 {
						want = high
					}
					if got := textKind(s2); got != want {
						t.Fatalf("length %d: %#x at %d: %d, want %d", n, c, i, got, want)
					}
				}
			}
		}
	}
}
