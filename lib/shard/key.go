package shard

import (
	"bytes"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// Reject reasons of shard, beside the shared ones in jsonl.
const (
	ReasonNoID      = "no_id"
	ReasonBadID     = "bad_id"
	ReasonBadRecord = "bad_record"
)

// rejection is why a record cannot be sharded.
type rejection struct {
	reason, detail string
}

// checkObject accepts a record that is one valid JSON object.
func checkObject(data []byte) *rejection {
	if !json.Valid(data) {
		return &rejection{jsonl.ReasonMalformedJSON, "not valid JSON"}
	}
	if b := bytes.TrimSpace(data); len(b) == 0 || b[0] != '{' {
		return &rejection{jsonl.ReasonNotObject, "a record must be a JSON object"}
	}
	return nil
}

// shardKey is the text whose hash places a record: its id (integers as
// their decimal text), or, for a record without one, the content id its
// prompt would be given by extract, so it lands where it would have with
// that id.
func shardKey(data []byte) (string, *rejection) {
	// The id is the field named exactly "id" (the last one, if repeated),
	// as every stage reads it: found by one checking scan of the line,
	// or, for a line the scan leaves (malformed, an escaped key), by the
	// checks that say why.
	raw, ok := scanID(data)
	if !ok {
		var rej *rejection
		if raw, rej = checkedID(data); rej != nil {
			return "", rej
		}
	}
	return keyOf(data, raw)
}

// checkedID is the raw id of a record found without the scan: the record
// checked whole, then its fields walked.
func checkedID(data []byte) ([]byte, *rejection) {
	if r := checkObject(data); r != nil {
		return nil, r
	}
	raw, err := record.FieldValue(data, "id")
	if err != nil {
		return nil, &rejection{jsonl.ReasonMalformedJSON, err.Error()}
	}
	return raw, nil
}

// keyOf is the key of a checked record whose raw id (nil: none) is raw.
func keyOf(data, raw []byte) (string, *rejection) {
	var id record.ID
	if raw != nil {
		if err := id.UnmarshalJSON(raw); err != nil {
			return "", &rejection{ReasonBadID, err.Error()}
		}
	}
	if !id.IsZero() {
		return id.Text, nil
	}
	var p record.Prompt
	if err := record.Decode(data, &p); err != nil {
		return "", &rejection{ReasonBadRecord, err.Error()}
	}
	if !p.HasPrompt() {
		return "", &rejection{ReasonNoID, "no id, and no messages or prompt to derive one from"}
	}
	return record.ContentID(p.AppendCanonical(nil)), nil
}

// HashShard is the shard of a record with the given key among n: the
// 64-bit xxh3 of the key text mod n. It depends on nothing but the key and
// n, so every run and every worker agree.
func HashShard(key string, n int) int {
	return int(xxh3.HashString(key) % uint64(n))
}

// scanID returns the raw value of the last top-level "id" of a record
// (nil: none), and whether the line is one object record.Object could
// check whole.
func scanID(data []byte) ([]byte, bool) {
	var o record.Object
	o.Scan(data)
	var id []byte
	for key, v, more := o.Next(); more; key, v, more = o.Next() {
		if string(key) == "id" {
			id = v
		}
	}
	return id, o.Valid()
}
