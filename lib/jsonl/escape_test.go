package jsonl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
)

var escapeSeeds = []string{"", "plain ascii text that runs past eight bytes", `"quoted" \ back\slash`,
	"tab\tnew\nline\rcr\bbs\fff\x00\x01\x1f\x7f", "<html> & 'x'", "函数 数据 模型 问题 résumé naïve café 😀",
	"caf\xe9 \xff\xfe \xe4\xb8 \xed\xa0\x80 \xe0\x80\x80", "line\u2028sep\u2029para \u2027\u202a",
	strings.Repeat("ü", 17) + "x" + strings.Repeat("数", 9), "\xe2\x80", "\xef\xbf\xbf\xef\xbf\xbe"}

func checkEscape(t *testing.T, s []byte) {
	t.Helper()
	want := json.AppendEscape([]byte("pre"), string(s), 0)
	if got := appendEscaped([]byte("pre"), s); !bytes.Equal(got, want) {
		t.Fatalf("%q: got %s, want %s", s, got, want)
	}
}

func TestAppendEscapedMatchesEncoder(t *testing.T) {
	for _, s := range escapeSeeds {
		for cut := range len(s) + 1 { // every length, so each byte falls in a word's every place
			checkEscape(t, []byte(s[cut:]))
			checkEscape(t, []byte(s[:cut]))
		}
	}
}

func FuzzAppendEscaped(f *testing.F) {
	for _, s := range escapeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) { checkEscape(t, s) })
}

// BenchmarkAppendEscaped escapes text like the corpus's: Chinese with
// ASCII words, punctuation and newlines among it.
func BenchmarkAppendEscaped(b *testing.B) {
	s := []byte(strings.Repeat("直少而设几据先来公外过级可任小将然大平机？\n意等他业同间资被此文任里线期点四新特机本从行必也我质下。用学water进电品后理对高next期国。\"quoted\" and some plain words, 67 of them. ", 200))
	dst := make([]byte, 0, 2*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		dst = appendEscaped(dst[:0], s)
	}
}
