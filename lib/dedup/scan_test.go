package dedup

import (
	"bytes"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
)

// scanCases are records the fast path takes, the ones it must leave to the
// decoder, and malformed lines: for each, the fast path's key (when it
// takes the line) must be the decoder's, and a line the decoder refuses
// must never be taken.
var scanCases = []struct {
	line string
	fast bool // the fast path takes it
}{
	{`{"id":"a","messages":[{"role":"user","content":"hi"}]}`, true},
	{` {"id" : 7 , "messages" : [ {"role":"system","content":"s"} , {"content":"q\n\u00e9\ud83d\ude00","role":"user"} ] } ` + "\r", true},
	{`{"messages":[{"role":"user","content":null}],"meta":{"a":[1,2.5e-3,true,false,null,{"b":"\"x\\"}]}}`, true},
	{`{"messages":[{"role":"user","content":"bad ` + "\xff\xc3" + ` utf8","name":"n","tool_calls":null}]}`, true},
	{`{"id":"a","messages":[{"role":"user","content":"hi"}],"source":"s","params":{"temperature":0.7}}`, true},
	{`{"id":"a","messages":[{"role":"user","content":"hi"}],"tools":"[]"}`, false},
	{`{"id":"a","messages":[{"role":"user","content":"hi"}],"system":"be brief"}`, false},
	{`{"id":"a","prompt":"complete me"}`, false},
	{`{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, false},
	{`{"messages":[{"role":"tool","content":"r","tool_call_id":"c"}]}`, false},
	{`{"messages":[{"role":"us\u0065r","content":"hi"}]}`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"messages":[{"role":"user","content":"ho"}]}`, false},
	{`{"id":1,"id":2,"messages":[{"role":"user","content":"hi"}]}`, false},
	{`{"messages":[]}`, false},
	{`{"messages":null}`, false},
	{`{"messages":[1]}`, false},
	{`{"messages":[{"role":1,"content":"hi"}]}`, false},
	{`{"messages":[{"role":"user","content":7}]}`, false},
	{`{"m\u0065ssages":[{"role":"user","content":"hi"}]}`, false},
	{`{"Messages":[{"role":"user","content":"hi"}]}`, false},
	{`{"messages":[{"role":"user","content":"hi"}]} x`, false},
	{`{"messages":[{"role":"user","content":"hi"}],}`, false},
	{`{"messages":[{"role":"user","content":"hi` + "\x01\t" + `"}]}`, false},
	{`{"messages":[{"role":"user","content":"hi\q"}]}`, false},
	{`{"messages":[{"role":"user","content":"\u12"}]}`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"n":01}`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"n":1.}`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"n":-}`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"n":tru}`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"n":[1,]}`, false},
	{`{"messages":[{"role":"user","content":"hi"}]`, false},
	{`[{"messages":[{"role":"user","content":"hi"}]}]`, false},
	{`{"messages":[{"role":"user","content":"hi"}],"x":"unterminated}`, false},
}

// checkScan compares the fast path with the decoder on line.
func checkScan(t *testing.T, line []byte) bool {
	t.Helper()
	for m := None; m <= Aggressive; m++ {
		fast, _ := NewKeyer(KeyPrompt, m)
		slow, _ := NewKeyer(KeyPrompt, m)
		key, ok := fast.scanPromptKey(line)
		if !ok {
			continue
		}
		want, err := slow.decodePromptKey(line)
		if err != nil {
			t.Fatalf("%s: the fast path took %q, which the decoder refuses: %v", m, line, err)
		}
		if !bytes.Equal(key, want) {
			t.Fatalf("%s: %q: the fast path's key %q differs from the decoder's %q", m, line, key, want)
		}
		if !bytes.Equal(fast.ID(line), slow.ID(line)) {
			t.Fatalf("%s: %q: id %q, the decoder's %q", m, line, fast.ID(line), slow.ID(line))
		}
		if a, b := fast.Text(), slow.Text(); !bytes.Equal(a, b) {
			t.Fatalf("%s: %q: the text --near compares is %q, the decoder's %q", m, line, a, b)
		}
	}
	k, _ := NewKeyer(KeyPrompt, None)
	_, ok := k.scanPromptKey(line)
	return ok
}

func TestScanPromptKey(t *testing.T) {
	for _, tt := range scanCases {
		if got := checkScan(t, []byte(tt.line)); got != tt.fast {
			t.Errorf("%s: fast path took it: %v, want %v", tt.line, got, tt.fast)
		}
	}
}

// TestScanPromptKeyRealData runs the comparison on every record of the
// real datasets' prompts and on a generated corpus.
func TestScanPromptKeyRealData(t *testing.T) {
	input, _ := corpusPrompts(3000, 7)
	input = append(input, fastchatPrompts(t)...)
	fast := 0
	lines := bytes.Split(bytes.TrimSuffix(input, []byte("\n")), []byte("\n"))
	for _, l := range lines {
		if checkScan(t, l) {
			fast++
		}
	}
	if fast < len(lines)*9/10 {
		t.Errorf("the fast path took %d of %d generated prompts; the common record must not need the decoder", fast, len(lines))
	}
}

// FuzzScanPromptKey: whatever the line, a line the fast path takes has the
// decoder's key.
func FuzzScanPromptKey(f *testing.F) {
	for _, tt := range scanCases {
		f.Add([]byte(tt.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkScan(t, line) })
}

// BenchmarkPromptKey compares the fast path with the decoder on the same
// records.
func BenchmarkPromptKey(b *testing.B) {
	input, _ := corpusPrompts(20000, 1)
	ls := bytes.Split(bytes.TrimSuffix(input, []byte("\n")), []byte("\n"))
	for _, path := range []string{"scan", "decode"} {
		b.Run(path, func(b *testing.B) {
			k, _ := NewKeyer(KeyPrompt, None)
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				for _, l := range ls {
					if path == "scan" {
						k.Key(l)
					} else {
						k.decodePromptKey(l)
					}
				}
			}
		})
	}
}

// TestProbes: the probes give bloom's own locations, and a filter filled
// through them is the filter bloom would have built.
func TestProbes(t *testing.T) {
	for i := range 2000 {
		h := distinct("p", i)
		b := h.Bytes()
		want := bloom.Locations(b[:], maxProbes)
		p := probesOf(h)
		for j := range uint64(maxProbes) {
			if got := p.at(j); got != want[j] {
				t.Fatalf("key %d, location %d: %d, bloom's %d", i, j, got, want[j])
			}
		}
	}
	ours, theirs := NewFilter(500, 1e-3), NewFilter(500, 1e-3)
	for i := range 3000 { // past the first layers' capacity
		h := distinct("q", i%2500)
		b := h.Bytes()
		p := probesOf(h)
		if a, c := ours.testOrAddProbes(&b, &p), theirs.TestOrAdd(&b); a != c {
			t.Fatalf("key %d: probes say %v, bloom %v", i, a, c)
		}
	}
	if len(ours.layers) < 3 || len(ours.layers) != len(theirs.layers) {
		t.Fatalf("%d and %d layers", len(ours.layers), len(theirs.layers))
	}
	for i := range ours.layers {
		if !ours.layers[i].bf.Equal(theirs.layers[i].bf) || ours.layers[i].count != theirs.layers[i].count {
			t.Fatalf("layer %d differs", i)
		}
	}
}
