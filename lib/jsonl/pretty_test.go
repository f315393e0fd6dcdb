package jsonl

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestPrettyPrinted(t *testing.T) {
	one := "{\n  \"id\": \"a\",\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"Hi\\n  there\"}\n  ]\n}\n"
	tests := []struct {
		name  string
		input string
		want  []got
	}{
		{"one object", one, []got{{data: `{"id":"a","messages":[{"role":"user","content":"Hi\n  there"}]}`, line: 1}}},
		{"blank lines and spaces before it", "\n\n  {  \n\"a\": 1\n}", []got{{data: `{"a":1}`, line: 3}}},
		{"objects one after another, as jq writes them", "{\n  \"a\": 1\n}\n{\n  \"a\": [\n    2\n  ]\n}\n",
			[]got{{data: `{"a":1}`, line: 1}, {data: `{"a":[2]}`, line: 4}}},
		{"objects side by side on a line", "{\n\"a\": 1\n} {\"a\": 2}\n", []got{{data: `{"a":1}`, line: 1}, {data: `{"a":2}`, line: 3}}},
		{"truncated", "{\n  \"a\": 1,\n  \"b\": [\n", []got{{line: 4, reason: ReasonUnreadable}}},
		{"a lone brace", "{", []got{{line: 1, reason: ReasonUnreadable}}},
		{"something not an object after one", "{\n\"a\": 1\n}\n[1]\n", []got{{data: `{"a":1}`, line: 1}, {line: 4, reason: ReasonUnreadable}}},
		// JSON Lines whose first line holds a whole object is JSON Lines.
		{"jsonl", "{\"a\": 1}\n{\n", []got{{data: `{"a": 1}`, line: 1}, {data: `{`, line: 2}}},
		{"jsonl starting with a brace and more", "{ \"a\": 1,\n\"b\": 2}\n", []got{{data: `{ "a": 1,`, line: 1}, {data: `"b": 2}`, line: 2}}},
	}
	for _, tt := range tests {
		for _, kind := range []string{"plain", "gzip", "zstd"} {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				data := []byte(tt.input)
				switch kind {
				case "gzip":
					data = gz(t, data)
				case "zstd":
					data = zst(t, data)
				}
				r := NewReader(context.Background(), nil, nil, bytes.NewReader(data), Options{})
				if g := readAll(t, r); !reflect.DeepEqual(g, tt.want) {
					t.Fatalf("got %+v, want %+v", g, tt.want)
				}
			})
		}
	}
}

// A pretty-printed object larger than the longest line is refused like
// an over-long line, without holding it.
func TestPrettyPrintedTooLong(t *testing.T) {
	input := "{\n\"a\": \"" + strings.Repeat("x", 200) + "\"\n}\n"
	r := NewReader(context.Background(), nil, nil, strings.NewReader(input), Options{MaxLine: 100})
	rec, err := r.Next()
	if err == nil || !strings.Contains(err.Error(), "record longer than 100 bytes") {
		t.Fatalf("got %q, %v; want a record-too-long error", rec.Data, err)
	}
}
