package testbin

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"testing"
)

// Golden reads a real tokenizer's reference cases
// (../shared/data/tokenizers/golden/MODEL.jsonl.gz), each line decoded
// into a T, in file order; where they are not beside the repository the
// test is skipped, saying so.
func Golden[T any](t testing.TB, model string) []T {
	t.Helper()
	f, err := os.Open(Tokenizers(t, "golden/"+model+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("golden %s line %d: %v", model, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
