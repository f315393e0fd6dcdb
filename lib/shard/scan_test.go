package shard

import "testing"

// decodedKey is shardKey through the checks alone, without the scan: the
// reference the scan's key must equal.
func decodedKey(data []byte) (string, *rejection) {
	raw, rej := checkedID(data)
	if rej != nil {
		return "", rej
	}
	return keyOf(data, raw)
}

var keyLines = []string{
	`{"id":"a"}`, `{"id":7}`, ` {"id" : "x\u00e9\"" , "n":[1,{"id":"inner"}]} `, `{"id":"a","id":"b"}`,
	`{"\u0069d":"esc"}`, `{"id":null,"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[{"role":"user","content":"hi"}]}`,
	`{"id":""}`, `{"id":1.5}`, `{"id":[1]}`, `{"id":"a"`, `{"id":"a"} x`, `[{"id":"a"}]`, `{"id":"a",}`, `{}`, `{"id":"` + "\x01" + `"}`,
	`{"id":"a","x":01}`, `{"id":-0}`, `{"id":12345678901234567890}`,
}

// checkKey: the scan's key (or rejection) is the checks' own.
func checkKey(t *testing.T, line []byte) {
	gk, gr := shardKey(line)
	wk, wr := decodedKey(line)
	if gk != wk || (gr == nil) != (wr == nil) || gr != nil && *gr != *wr {
		t.Fatalf("%q: key %q, %v; without the scan %q, %v", line, gk, gr, wk, wr)
	}
}

func TestScanKey(t *testing.T) {
	for _, l := range keyLines {
		checkKey(t, []byte(l))
	}
}

func FuzzScanKey(f *testing.F) {
	for _, l := range keyLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkKey(t, line) })
}
