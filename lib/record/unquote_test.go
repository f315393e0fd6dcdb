package record

import (
	"bytes"
	stdjson "encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/segmentio/encoding/json"
)

// unquoteTests are JSON string literals and their text; they seed
// FuzzUnquote too.
var unquoteTests = []struct {
	name, q, want string
}{
	{"empty", `""`, ""},
	{"plain", `"plain text"`, "plain text"},
	{"escapes", `"a\nb\t\"c\"\\d\/e"`, "a\nb\t\"c\"\\d/e"},
	{"control escapes", `"\b\f\r"`, "\b\f\r"},
	{"BMP escapes", `"\u00e9\u4E2D"`, "é中"},
	{"surrogate pair", `"\ud83d\ude00"`, "😀"},
	{"lone high surrogate", `"\ud83d x"`, "\uFFFD x"},
	{"lone high surrogate at the end", `"\ud83d"`, "\uFFFD"},
	{"lone low surrogate", `"\ude00\ud83d x"`, "\uFFFD\uFFFD x"},
	{"high surrogate before a non-surrogate escape", `"\ud83d\u0041"`, "\uFFFDA"},
	{"UTF-8 as it stands", `"é中😀"`, "é中😀"},
	{"U+FFFD as it stands", "\"\uFFFD\"", "\uFFFD"},
	{"invalid byte", "\"a\xffb\"", "a\uFFFDb"},
	{"invalid bytes, each replaced", "\"\xff\xfe\"", "\uFFFD\uFFFD"},
	{"sequence cut at the end", "\"ab\xc3\"", "ab\uFFFD"},
	{"sequence cut by an escape", "\"\xc3\\n\xa9\"", "\uFFFD\n\uFFFD"},
	{"invalid byte with escapes", "\"\\t\xff\\u00e9\"", "\t\uFFFDé"},
	{"surrogate written in UTF-8", "\"\xed\xa0\x80\"", "\uFFFD\uFFFD\uFFFD"},
	{"overlong encoding", "\"\xc0\xaf\"", "\uFFFD\uFFFD"},
}

func TestUnquote(t *testing.T) {
	for _, tt := range unquoteTests {
		t.Run(tt.name, func(t *testing.T) {
			var std string
			if err := stdjson.Unmarshal([]byte(tt.q), &std); err != nil || std != tt.want {
				t.Fatalf("the table disagrees with encoding/json on %q: it says %q (%v)", tt.q, std, err)
			}
			q := []byte(tt.q)
			if got, _ := Unquote(q, nil); got != tt.want {
				t.Errorf("Unquote(%q) = %q, want %q", tt.q, got, tt.want)
			}
			if got := AppendUnquoted([]byte("prefix:"), q); string(got) != "prefix:"+tt.want {
				t.Errorf("AppendUnquoted(%q) = %q, want prefix:%q", tt.q, got, tt.want)
			}
			escaped, nonASCII := hints(q)
			if got, _ := UnquoteKnown(q, nil, escaped, nonASCII); got != tt.want {
				t.Errorf("UnquoteKnown(%q, %v, %v) = %q, want %q", tt.q, escaped, nonASCII, got, tt.want)
			}
		})
	}
}

// TestUnquoteAliases: text with nothing to decode is the literal's own
// bytes, and decoded text goes into the buffer given.
func TestUnquoteAliases(t *testing.T) {
	q := []byte(`"no escape, é"`)
	s, _ := Unquote(q, nil)
	if unsafe.StringData(s) != &q[1] {
		t.Error("the text of a literal without escapes was copied")
	}
	buf := make([]byte, 0, 64)
	s, got := Unquote([]byte(`"a\nb"`), buf)
	if s != "a\nb" || unsafe.StringData(s) != unsafe.SliceData(buf[:1]) || &got[0] != &buf[:1][0] {
		t.Error("decoded text did not go into the buffer given")
	}
}

// malformedLiterals are not valid JSON strings: they must decode to some
// valid UTF-8 without a panic.
var malformedLiterals = []string{``, `"`, `"\`, `"\"`, `"\u12"`, `"\u12`, `"\ud83d\u"`, `"\ud83d\ude0"`, `"\x"`, `"\uzzzz"`, "\"\\\xff\""}

// FuzzUnquote: for any bytes, the three entry points agree and give valid
// UTF-8 without a panic; for every literal encoding/json accepts, the text
// is the one it (and segmentio's decoder) gives.
func FuzzUnquote(f *testing.F) {
	for _, tt := range unquoteTests {
		f.Add(tt.q)
	}
	for _, q := range malformedLiterals {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		raw := []byte(q)
		got, _ := Unquote(raw, nil)
		if !utf8.ValidString(got) {
			t.Fatalf("Unquote(%q) = %q is not valid UTF-8", q, got)
		}
		if app := AppendUnquoted([]byte("p"), raw); string(app) != "p"+got {
			t.Fatalf("AppendUnquoted(%q) = %q, Unquote says %q", q, app, got)
		}
		escaped, nonASCII := hints(raw)
		if known, _ := UnquoteKnown(raw, []byte("stale buffer"), escaped, nonASCII); known != got {
			t.Fatalf("UnquoteKnown(%q, %v, %v) = %q, Unquote says %q", q, escaped, nonASCII, known, got)
		}
		if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
			return // the parsers hand over a string value as its literal alone, without space around it
		}
		var std, seg string
		if stdjson.Unmarshal(raw, &std) != nil {
			return
		}
		if got != std {
			t.Fatalf("%q decodes to %q, encoding/json says %q", q, got, std)
		}
		if err := json.Unmarshal(raw, &seg); err != nil || seg != std {
			t.Fatalf("%q: segmentio decodes %q (%v), encoding/json %q", q, seg, err, std)
		}
	})
}

// hints is what a scanner learns of a literal: an escape, a byte above ASCII.
func hints(q []byte) (escaped, nonASCII bool) {
	for _, c := range q {
		nonASCII = nonASCII || c >= utf8.RuneSelf
	}
	return bytes.IndexByte(q, '\\') >= 0, nonASCII
}

// utf8Cases are byte runs valid and not, for TestValidIsUTF8Valid and
// FuzzValid: cut, overlong, surrogate and out-of-range sequences among
// the valid ones of every length.
var utf8Cases = []string{
	"", "a", "é", "中", "😀", "\uFFFD", "\xff", "\xc3", "\xe4\xb8", "\xf0\x9f\x98",
	"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
	"\x80", "\xbf", "\xc3\xa9\xa9", "\xf4\x8f\xbf\xbf",
}

// TestValidIsUTF8Valid puts each case at every offset of runs of ASCII,
// Latin, CJK and emoji text long enough for the vectorized path (32 bytes
// and more, across its block boundaries), and asks valid and utf8.Valid.
func TestValidIsUTF8Valid(t *testing.T) {
	for _, fill := range []string{"a", "é", "中", "😀", "a中é"} {
		for n := 0; n <= 140; n += 7 {
			base := []byte(strings.Repeat(fill, n))
			for _, c := range utf8Cases {
				for at := 0; at <= len(base); at++ {
					b := append(append(append([]byte(nil), base[:at]...), c...), base[at:]...)
					if got, want := valid(b), utf8.Valid(b); got != want {
						t.Fatalf("valid(%q) = %v, utf8.Valid says %v", b, got, want)
					}
				}
			}
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range utf8Cases {
		f.Add([]byte(strings.Repeat("中a", 20) + c + strings.Repeat("é", 20)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := valid(b), utf8.Valid(b); got != want {
			t.Fatalf("valid(%q) = %v, utf8.Valid says %v", b, got, want)
		}
	})
}
