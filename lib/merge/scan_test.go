package merge

import (
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// checkTopFields: the fields the scan finds are the ones the checks and
// record.EachField find, on every line the scan takes.
func checkTopFields(t *testing.T, data []byte) {
	var got topFields
	if !got.scan(data) {
		return
	}
	if !json.Valid(data) {
		t.Fatalf("the scan took %q, which is not valid JSON", data)
	}
	var want topFields
	if err := record.EachField(data, func(key string, value []byte) error {
		want.set(key, value)
		return nil
	}); err != nil {
		t.Fatalf("the scan took %q, which EachField refuses: %v", data, err)
	}
	for i, pair := range [][2][]byte{{got.id, want.id}, {got.sample, want.sample}, {got.output, want.output}, {got.err, want.err}, {got.reject, want.reject}} {
		if string(pair[0]) != string(pair[1]) || (pair[0] == nil) != (pair[1] == nil) {
			t.Fatalf("%q: field %d is %q by the scan, %q by EachField", data, i, pair[0], pair[1])
		}
	}
}

func TestScanTopFields(t *testing.T) {
	for _, l := range []string{
		`{"id":"a","output":{"text":"x","finish_reason":"stop"},"sample":1}`, ` {"id" : 7 , "error" : {"status":500} , "id":8} `,
		`{"id":"a","output":null,"reject":{"reason":"loop"}}`, `{"\u0069d":"a"}`, `{"id":"a"`, `{}`,
	} {
		checkTopFields(t, []byte(l))
	}
	for _, b := range badLines {
		checkTopFields(t, []byte(b.line))
	}
}

func FuzzScanTopFields(f *testing.F) {
	for _, b := range badLines {
		f.Add([]byte(b.line))
	}
	seedLines(f, td("gen-a.jsonl"), td("gen-a.errors.jsonl"), td("prompts.jsonl"))
	f.Fuzz(func(t *testing.T, data []byte) { checkTopFields(t, data) })
}
