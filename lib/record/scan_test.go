package record

import (
	"encoding/json"
	"testing"
)

var scanLines = []string{
	`{}`, ` {"a":1} `, `{"a":[1,-0.5e+3,true,false,null,{"b":"c\"\\\/\b\f\n\r\t\u00e9"}],"d":{}}`,
	`{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":"x` + "\x01" + `"}`, `{"a":"\x"}`, `{"a":"\u12g4"}`,
	`{"a":1} {}`, `[1]`, `{"a\u0062":1}`, `{"a" 1}`, `{"a":tru}`, `{"a":[1 2]}`, `{"a":"unterminated}`,
	`{"long":"` + "0123456789abcdef0123456789abcdef\\n0123456789abcdef\\\"" + `"}`,
}

// checkObjectScan: an object Scan walks to its end is valid JSON, and its
// members are the ones encoding/json reads.
func checkObjectScan(t *testing.T, line []byte) {
	var o Object
	o.Scan(line)
	n := 0
	for key, v, ok := o.Next(); ok; key, v, ok = o.Next() {
		n++
		if !json.Valid(v) {
			t.Fatalf("%q: member %q has the invalid value %q", line, key, v)
		}
		var w Object
		w.Walk(v)
		if v[0] == '{' {
			for _, _, ok := w.Next(); ok; _, _, ok = w.Next() {
			}
		}
	}
	if !o.Valid() {
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("Scan took %q, which encoding/json refuses: %v", line, err)
	}
	if n < len(m) {
		t.Fatalf("%q: %d members walked, %d distinct keys", line, n, len(m))
	}
}

func TestObjectScan(t *testing.T) {
	valid := map[string]bool{`{}`: true, ` {"a":1} `: true, scanLines[2]: true, scanLines[len(scanLines)-1]: true}
	for _, l := range scanLines {
		checkObjectScan(t, []byte(l))
		var o Object
		o.Scan([]byte(l))
		for _, _, ok := o.Next(); ok; _, _, ok = o.Next() {
		}
		if o.Valid() != valid[l] {
			t.Errorf("%s: Valid %v, want %v", l, o.Valid(), valid[l])
		}
	}
}

func FuzzObjectScan(f *testing.F) {
	for _, l := range scanLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkObjectScan(t, line) })
}

// TestHasControl puts one control character at every position of runs of
// every length up to 80, among bytes that are none (0x20, 0x7f, high ones).
func TestHasControl(t *testing.T) {
	fill := []byte{' ', 'a', 0x7f, 0x80, 0xff, '"', '\\'}
	for n := 0; n <= 80; n++ {
		s := make([]byte, n)
		for i := range s {
			s[i] = fill[i%len(fill)]
		}
		if hasControl(s) {
			t.Fatalf("length %d: a control character found in %q", n, s)
		}
		for i := range n {
			for _, c := range []byte{0, '\n', 0x1f} {
				s2 := append([]byte(nil), s...)
				s2[i] = c
				if !hasControl(s2) {
					t.Fatalf("length %d: %#x at %d missed", n, c, i)
				}
			}
		}
	}
}
