package quality

import (
	stdjson "encoding/json"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/recordtest"
)

// FuzzScanValid: the scanner accepts exactly the lines json.Valid (and
// encoding/json's) accepts.
func FuzzScanValid(f *testing.F) {
	for _, s := range recordtest.Values {
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
