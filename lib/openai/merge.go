package openai

import (
	"bytes"
	"fmt"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// Merge returns base (a JSON object) with the top-level fields of each
// override object laid over it in turn: a field of a later object replaces
// the same field of an earlier one, a new field is added at the end, and a
// field set to null is removed (so a per-record {"max_tokens": null} falls
// back to the server's default). Field order is otherwise kept. Nil or
// empty overrides are skipped.
func Merge(base []byte, overrides ...[]byte) ([]byte, error) {
	type field struct {
		key   string
		value []byte
	}
	var fields []field
	index := map[string]int{}
	add := func(key string, value []byte) error {
		if i, ok := index[key]; ok {
			fields[i].value = value
			return nil
		}
		index[key] = len(fields)
		fields = append(fields, field{key, value})
		return nil
	}
	if err := record.EachField(base, add); err != nil {
		return nil, fmt.Errorf("request body: %w", err)
	}
	for _, o := range overrides {
		if len(bytes.TrimSpace(o)) == 0 {
			continue
		}
		if err := record.EachField(o, add); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, len(base)+64)
	out = append(out, '{')
	for _, f := range fields {
		if string(f.value) == "null" {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = json.AppendEscape(out, f.key, 0)
		out = append(out, ':')
		out = append(out, f.value...)
	}
	return append(out, '}'), nil
}

// ValidObject checks that b is one JSON object, as --extra-body and a
// record's "params" must be.
func ValidObject(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return fmt.Errorf("not a JSON object: %.40s", b)
	}
	return nil
}
