package quality

import (
	stdjson "encoding/json"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
)

var validSeeds = []string{
	`{}`, ` { } `, `[]`, `[1,2,3]`, `{"a":1,}`, `[1,]`, `{,}`, `{"a" 1}`, `{"a":}`, `"x"`, `"\u00e9"`, `"\u00g9"`, `"\x"`,
	`"a` + "\x01" + `b"`, "\"\xff\xfe\"", "\"a\x7fb\"", `"\"`, `"\\"`, `"ab\`, `"abcdefghijklmnop\"qrstuvwxyz"`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `.5`, `1.5e3x`, `true`, `tru`, `truex`, `nul`, `null `, `false`,
	"\t{\"a\":[true,false,null,{\"b\":\"c\"}]}\r\n", `{"a":1}{}`, `{"a":1} x`, `{"output":{"text":"a"}}`, `{"output":{"text":"a\nb"},"output":null}`,
	`{"a":"` + strings.Repeat("long text without escapes ", 10) + `"}`, `{"a":"` + strings.Repeat("é\\n", 20) + `"}`,
	strings.Repeat("[", 50) + strings.Repeat("]", 50), "\f{}", "{}\v", "{\"\u00a0\":1}",
}

// FuzzScanValid: the scanner accepts exactly the lines json.Valid (and
// encoding/json's) accepts.
func FuzzScanValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add(s)
	}
	for _, s := range recordSeeds {
		f.Add(s)
	}
	var sc scanner
	f.Fuzz(func(t *testing.T, line string) {
		got := sc.scan([]byte(line))
		if want := json.Valid([]byte(line)); got != want {
			t.Fatalf("scan(%q) = %v, json.Valid %v", line, got, want)
		}
		if want := stdjson.Valid([]byte(line)); got != want {
			t.Fatalf("scan(%q) = %v, encoding/json.Valid %v", line, got, want)
		}
	})
}

func FuzzIndexAnchored(f *testing.F) {
	f.Add("the end of the end of the end", "the end ", 0)
	f.Add("aaaaaaaaab", "aab", 2)
	f.Fuzz(func(t *testing.T, s, sub string, a int) {
		if len(sub) == 0 {
			return
		}
		a = (a%len(sub) + len(sub)) % len(sub)
		if got, want := indexAnchored(s, sub, a), strings.Index(s, sub); got != want {
			t.Fatalf("indexAnchored(%q, %q, %d) = %d, strings.Index %d", s, sub, a, got, want)
		}
	})
}
